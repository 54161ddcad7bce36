import { GRANT_KEY, JOB_TOKEN_KEY, REVOKED_KEY, TRACED_JOB_KEY } from '../store/redis-keys';
import { defineScripts } from '../store/redis-scripts';
import { RedisStore } from '../store/redis-store';
import { MIN_TRACED_MEMORY_MS, TracedJob } from '../traced-work/traced-work';
import { Grant, GrantStore, SaveGrantOptions } from './grant';
import { GRANT_SCRIPTS } from './redis-grant-store.scripts';

export class RedisGrantStore implements GrantStore {
  private readonly scripts;

  constructor(private readonly store: RedisStore) {
    this.scripts = defineScripts(store, GRANT_SCRIPTS);
  }

  async saveGrant(grant: Grant, tracedJob?: TracedJob, { indexJobToken = true }: SaveGrantOptions = {}): Promise<Grant> {
    const ttlMs = grant.expiresAt - Date.now();
    const { expiresAt, ...fields } = grant;
    const grantJsonUpToExpiry = `${JSON.stringify(fields).slice(0, -1)},"expiresAt":`;
    const grantKey = GRANT_KEY(grant.jobId);
    // The index is looked up by digest alone, so it is another slot: a lookup checks the grant's own digest,
    // so an index entry written without its grant (or outliving it) finds nothing.
    const index = indexJobToken && grant.jobTokenDigest !== undefined && ttlMs > 0 ? JOB_TOKEN_KEY(grant.jobTokenDigest) : undefined;
    const indexInScript = index !== undefined && !this.store.isCluster;
    const jobKeys = [grantKey, REVOKED_KEY(grant.jobId), TRACED_JOB_KEY(grant.jobId)] as const;
    const keys = indexInScript ? ([...jobKeys, index] as const) : jobKeys;
    const args = [grantJsonUpToExpiry, ttlMs, expiresAt, tracedJob === undefined ? '' : JSON.stringify(tracedJob), MIN_TRACED_MEMORY_MS, grant.jobId] as const;
    return this.store.guard(async () => {
      // Outside a cluster everything a pickup stores is one script, one command. On a cluster the index, in another
      // slot, is written beside it and waited for with it.
      const saved = this.scripts.saveGrant(keys, args);
      const [outcome, revokedAt, keptExpiresAt] =
        index === undefined || indexInScript ? await saved : (await Promise.all([saved, this.store.client.set(index, String(grant.jobId), 'PX', ttlMs)]))[0];
      if (outcome === 'absent') return grant;
      const stored = outcome === 'kept' ? { ...grant, expiresAt: Number(keptExpiresAt) } : grant;
      if (this.store.waitsForReplicas) {
        // On a cluster the index may sit on another primary, with replicas of its own.
        await Promise.all([this.store.replicated(grantKey), index !== undefined && !indexInScript && this.store.replicated(index)]);
      }
      return revokedAt === null ? stored : { ...stored, revokedAt: Number(revokedAt) };
    });
  }

  async withdrawGrant(grant: Grant, tracedJob: TracedJob): Promise<boolean> {
    const withdrawn = await this.store.guard(() =>
      this.scripts.withdrawGrant([GRANT_KEY(grant.jobId), TRACED_JOB_KEY(grant.jobId)], [JSON.stringify(tracedJob), grant.expiresAt]),
    );
    return withdrawn === 1;
  }

  async findGrant(jobId: number): Promise<Grant | null> {
    const [stored, revokedAt] = await this.store.guard(() => this.store.client.mget(GRANT_KEY(jobId), REVOKED_KEY(jobId)));
    if (stored === null) return null;
    const grant = JSON.parse(stored) as Grant;
    return revokedAt === null ? grant : { ...grant, revokedAt: Number(revokedAt) };
  }

  async findGrantByJobTokenDigest(jobTokenDigest: string): Promise<Grant | null> {
    const jobId = await this.store.guard(() => this.store.client.get(JOB_TOKEN_KEY(jobTokenDigest)));
    if (jobId === null) return null;
    const grant = await this.findGrant(Number(jobId));
    // A job picked up again with a new token leaves the old index entry behind until it expires.
    return grant?.jobTokenDigest === jobTokenDigest ? grant : null;
  }

  async revokeGrant(jobId: number, revokedAt: number): Promise<Grant | null> {
    const revoked = await this.store.guard(async () => {
      const stored = await this.scripts.revokeGrant([GRANT_KEY(jobId), REVOKED_KEY(jobId)], [revokedAt]);
      if (stored !== null) await this.store.replicated(GRANT_KEY(jobId));
      return stored;
    });
    return revoked === null ? null : this.findGrant(jobId);
  }
}
