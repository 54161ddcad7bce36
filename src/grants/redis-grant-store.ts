import { GRANT_KEY, JOB_TOKEN_KEY, REVOKED_KEY, TRACED_JOB_KEY } from '../store/redis-keys';
import { RedisStore } from '../store/redis-store';
import { MIN_TRACED_MEMORY_MS, TracedJob } from '../traced-work/traced-work';
import { Grant, GrantStore, SaveGrantOptions } from './grant';

/**
 * Records the revocation time beside the grant, living exactly as long as the grant; an earlier
 * revocation is never pushed later. A key of its own rather than a rewrite of the grant's JSON:
 * Lua's cjson would round ids above 10^14.
 */
const REVOKE_GRANT = `
local ttl = redis.call('PTTL', KEYS[1])
if ttl <= 0 then return false end
local current = redis.call('GET', KEYS[2])
if current and tonumber(current) <= tonumber(ARGV[1]) then return current end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ttl)
return ARGV[1]
`;

/**
 * A pickup's grant write in one atomic step on the job's slot (SPEC §4: re-decorating keeps the expiry and
 * never lifts a revocation). The first pickup sets the record with its expiry (PX, NX); a later one replaces
 * the fields but keeps the first expiry, both in the JSON and as the key's own TTL (KEEPTTL); a record that
 * has expired is never brought back, since a script runs alone. ARGV[1] is the grant's JSON up to the value
 * of its last member, `expiresAt`: only that number is taken from the stored record, so no id goes through
 * Lua's cjson, which would round those above 10^14 when encoding. The traced job (KEYS[3], ARGV[4]; none
 * when ARGV[4] is empty) is set in the same step, the job's slot too, to live as long as the grant as stored
 * and at least ARGV[5] ms (SPEC §10): one script rather than a second write per pickup, a measured win.
 * KEYS[4], when given, is the job-token index (ARGV[6] the job id), set for the pickup's own TTL as the
 * separate write would set it: only outside a cluster, where a script may touch any key; on a cluster it is
 * another slot and written beside the script. Answers the outcome, the revocation time and the expiry kept.
 */
const SAVE_GRANT = `
if KEYS[4] and tonumber(ARGV[2]) > 0 then redis.call('SET', KEYS[4], ARGV[6], 'PX', ARGV[2]) end
local revokedAt = redis.call('GET', KEYS[2])
local function remember(ttl)
  if ARGV[4] ~= '' then redis.call('SET', KEYS[3], ARGV[4], 'PX', math.max(ttl, tonumber(ARGV[5]))) end
end
if tonumber(ARGV[2]) > 0 and redis.call('SET', KEYS[1], ARGV[1] .. ARGV[3] .. '}', 'PX', ARGV[2], 'NX') then
  remember(tonumber(ARGV[2]))
  return {'created', revokedAt}
end
local current = redis.call('GET', KEYS[1])
if not current then
  remember(0)
  return {'absent', revokedAt}
end
local expiresAt = string.format('%.0f', cjson.decode(current).expiresAt)
redis.call('SET', KEYS[1], ARGV[1] .. expiresAt .. '}', 'KEEPTTL')
remember(redis.call('PTTL', KEYS[1]))
return {'kept', revokedAt, expiresAt}
`;

/**
 * Takes back what one SAVE_GRANT wrote (KEYS: grant, traced job): only if the traced job is that write's (ARGV[1],
 * its JSON, with the pickup's time) and the grant still ends at that write's expiry (ARGV[2]), so a grant that kept an
 * earlier pickup's expiry, or another pickup's record, stays. The job-token index is left: a lookup by digest checks
 * the grant, which is gone.
 */
const WITHDRAW_GRANT = `
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, -(#ARGV[2] + 2)) ~= ':' .. ARGV[2] .. '}' then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
`;

/** What SAVE_GRANT answers: `absent` when the grant had already expired and none was stored before. */
type SaveGrantReply = ['created' | 'absent', string | null] | ['kept', string | null, string];

/** The grant scripts as ioredis commands: sent by SHA (EVALSHA) after the first use, not as text. */
interface GrantScripts {
  /** Three keys (grant, revocation, traced job), or four with the job-token index; then ARGV as SAVE_GRANT reads it. */
  cjtSaveGrant(numberOfKeys: 3 | 4, ...keysAndArgs: string[]): Promise<SaveGrantReply>;
  cjtRevokeGrant(grantKey: string, revokedKey: string, revokedAt: string): Promise<string | null>;
  cjtWithdrawGrant(grantKey: string, tracedJobKey: string, tracedJob: string, expiresAt: string): Promise<number>;
}

export class RedisGrantStore implements GrantStore {
  private readonly scripts: GrantScripts;

  constructor(private readonly store: RedisStore) {
    // The number of keys is given on each call: three, or four with the job-token index (outside a cluster).
    store.client.defineCommand('cjtSaveGrant', { lua: SAVE_GRANT });
    store.client.defineCommand('cjtRevokeGrant', { numberOfKeys: 2, lua: REVOKE_GRANT });
    store.client.defineCommand('cjtWithdrawGrant', { numberOfKeys: 2, lua: WITHDRAW_GRANT });
    this.scripts = store.client as unknown as GrantScripts;
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
    const args = [
      grantKey,
      REVOKED_KEY(grant.jobId),
      TRACED_JOB_KEY(grant.jobId),
      ...(indexInScript ? [index] : []),
      grantJsonUpToExpiry,
      String(ttlMs),
      String(expiresAt),
      tracedJob === undefined ? '' : JSON.stringify(tracedJob),
      String(MIN_TRACED_MEMORY_MS),
      String(grant.jobId),
    ];
    return this.store.guard(async () => {
      // Outside a cluster everything a pickup stores is one script, one command. On a cluster the index, in another
      // slot, is written beside it and waited for with it.
      const saved = this.scripts.cjtSaveGrant(indexInScript ? 4 : 3, ...args);
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
      this.scripts.cjtWithdrawGrant(GRANT_KEY(grant.jobId), TRACED_JOB_KEY(grant.jobId), JSON.stringify(tracedJob), String(grant.expiresAt)),
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
      const stored = await this.scripts.cjtRevokeGrant(GRANT_KEY(jobId), REVOKED_KEY(jobId), String(revokedAt));
      if (stored !== null) await this.store.replicated(GRANT_KEY(jobId));
      return stored;
    });
    return revoked === null ? null : this.findGrant(jobId);
  }
}
