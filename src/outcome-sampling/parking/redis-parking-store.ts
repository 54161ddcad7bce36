import {
  OUTCOME_FACTS_KEY,
  PARKED_KEY,
  PIPELINE_JOB_STATUSES_KEY,
  PARKED_SIZE_KEY,
  PARKING_OVERDUE_KEY,
  PARKING_TAKE_BACK_KEY,
  PARKING_TOTAL_KEY,
  TRACE_DECISION_KEY,
} from '../../store/redis-keys';
import { defineScripts, evalArguments, ttlArgument } from '../../store/redis-scripts';
import { RedisStore } from '../../store/redis-store';
import type { OutcomeSamplingReason } from '../../otlp/sampling-reason';
import {
  EntryToPark,
  FactsUpdate,
  idToPark,
  OutcomeFacts,
  ParkedEntry,
  ParkedEntryId,
  parsedEntryId,
  ParkingLimits,
  ParkingStore,
  ParkingUsage,
  ParkOutcome,
  RootOutcome,
  TraceDecision,
} from './parking';
import { JoinedPark, JoinedParks } from './joined-parks';
import { packedBody, unpackedBody } from './packed-body';
import { PARK_MANY_FIELD, PARK_MANY_TTL, ParkKeys, ParkManyEntry, ParkReply, PARKING_SCRIPTS } from './redis-parking-store.scripts';

/**
 * What one parking transaction carries at most. Redis runs it whole, and every other command (a pickup's grant) waits
 * behind it: the bytes bound the bodies' writes (about 20 µs for each 46 KiB export), the entries the script's work
 * for a run of small ones (the control plane's spans).
 */
const JOINED_PARKS_LIMITS = { maxEntries: 16, maxBytes: 128 * 1024 };

const encodeDecision = (decision: TraceDecision) => `${decision.keep ? 'keep' : 'drop'}:${decision.reason}`;

function decisionOf(stored: string): TraceDecision {
  const [verdict, reason] = stored.split(':');
  return verdict === 'keep' ? { keep: true, reason: reason as OutcomeSamplingReason } : { keep: false, reason: reason as 'outcome' | 'no_outcome' };
}

/**
 * The parking store on Redis (SPEC §11): one hash of entries per trace, in the trace's slot, with its size beside
 * it; bodies are stored as bytes (no base64), exports packed with Brotli when that saves an eighth (packed-body.ts: a
 * runner's 100-span export about 9×), so a parked span costs at most its encoded size plus the hash's per-field
 * overhead, and bounds count it as it would be forwarded. Bodies are never read whole: a drop deletes without reading
 * (UNLINK), a delivery reads the field names and then pages of bodies, so no command's reply outgrows the store's
 * timeout.
 */
export class RedisParkingStore implements ParkingStore {
  private readonly scripts;
  private readonly joined = new JoinedParks((parks) => this.parkMany(parks), JOINED_PARKS_LIMITS);

  constructor(private readonly store: RedisStore) {
    this.scripts = defineScripts(store, PARKING_SCRIPTS);
  }

  async park(traceId: string, entry: EntryToPark, limits: ParkingLimits): Promise<ParkOutcome> {
    const bytes = entry.body.length;
    const spans = entry.spans;
    const field = idToPark(entry).id;
    // An export is stored packed when that saves enough (packed-body.ts); the id, the digest and every bound count the
    // body as it is. The control plane's spans stay plain: a replica of a version before packing, during a rolling
    // upgrade, would read packed lines as spans and move them into the outbox, where it only fails a delivery round on
    // an export it cannot read (its lease runs out and a newer replica takes it).
    const stored = entry.kind === 'spans' ? entry.body : await packedBody(entry.body);
    const exempt = entry.exempt === true;
    const maxTraceSpans = exempt ? -1 : limits.maxTraceSpans;
    const maxTraceBytes = limits.maxTraceBytes;
    const ttl = ttlArgument(limits.holdMs + limits.rememberMs);
    const maxTotalBytes = exempt ? -1 : limits.maxTotalBytes;
    const dueAt = Date.now() + limits.holdMs;
    const keys: ParkKeys = [PARKED_KEY(traceId), PARKED_SIZE_KEY(traceId), TRACE_DECISION_KEY(traceId)];
    if (!this.store.isCluster) {
      // One server holds every key: checked, reserved and parked in one transaction, with whatever other entries wait
      // to be parked beside it, so a lost answer leaves either nothing or a parked entry with its reservation (given
      // back when the trace ends).
      const args: ParkManyEntry = [field, bytes, spans, maxTraceSpans, maxTraceBytes, ttl, maxTotalBytes, traceId, dueAt];
      return this.outcomeOf(traceId, await this.joined.park({ keys, args, body: stored }));
    }
    const reply = await this.store.guard(async () => {
      // On a cluster the budget ({parking}) and the trace are two slots: reserved first, given back if not parked.
      const reserved = await this.scripts.parkingReserve([PARKING_TOTAL_KEY, PARKING_OVERDUE_KEY], [bytes, spans, maxTotalBytes, traceId, dueAt]);
      if (Number(reserved) !== 1) return ['full', 'total_bytes'];
      const giveBack = () => this.scripts.parkingGiveBack([PARKING_TOTAL_KEY], [traceId, bytes, spans]);
      let parked: ParkReply;
      try {
        parked = await this.scripts.park(keys, [stored, field, spans, maxTraceSpans, maxTraceBytes, ttl]);
      } catch (error) {
        // Perhaps parked after all (a timeout after the write): the trace's finish gives the reservation back then.
        await giveBack().catch(() => undefined);
        throw error;
      }
      if (parked[0] !== 'parked') await giveBack();
      // Acknowledged to the runner only once kept (SPEC §11): with REDIS_WAIT_REPLICAS, once replicas have it.
      else await this.store.replicated(PARKED_KEY(traceId));
      return parked;
    });
    return this.outcomeOf(traceId, reply);
  }

  /**
   * Several entries parked in one transaction (parkMany, the bodies, settle), in order; each answered its own
   * reply, or the error that stands for it. A parked entry is acknowledged only once kept (SPEC §11): with
   * REDIS_WAIT_REPLICAS, once replicas have it, and one WAIT covers every write of the transaction.
   */
  private async parkMany(parks: readonly JoinedPark[]): Promise<(ParkReply | Error)[]> {
    const replies = await this.store.guard(() => this.parkingTransaction(parks));
    const parkedAt = replies.findIndex((reply) => reply[0] === 'parked');
    if (parkedAt < 0 || !this.store.waitsForReplicas) return replies;
    const unconfirmed = await this.store
      .guard(() => this.store.replicated(parks[parkedAt].keys[0]))
      .then(
        () => undefined,
        (error: Error) => error,
      );
    return unconfirmed === undefined ? replies : replies.map((reply) => (reply[0] === 'parked' ? unconfirmed : reply));
  }

  /** parkMany, an HSET per body, settle: one transaction of the store's (`RedisStore.transaction`). */
  private async parkingTransaction(parks: readonly JoinedPark[]): Promise<ParkReply[]> {
    const keys = parks.flatMap((park) => park.keys);
    const parkedKeys = parks.map((park) => park.keys[0]);
    const fields = parks.map((park) => park.args[PARK_MANY_FIELD]);
    const ttl = parks.reduce((longest, park) => Math.max(longest, park.args[PARK_MANY_TTL]), 1);
    const [replies] = await this.store.transaction((redis) => [
      redis.eval(
        ...evalArguments(
          PARKING_SCRIPTS.parkMany,
          [PARKING_TOTAL_KEY, PARKING_OVERDUE_KEY, PARKING_TAKE_BACK_KEY, ...keys],
          parks.flatMap((park) => park.args),
        ),
      ),
      ...parks.map((park) => redis.hset(park.keys[0], park.args[PARK_MANY_FIELD], park.body)),
      redis.eval(...evalArguments(PARKING_SCRIPTS.settle, [PARKING_TAKE_BACK_KEY, ...parkedKeys], [ttl, ...fields])),
    ]);
    return replies as ParkReply[];
  }

  /** What a park's reply says: a full total is looked at again, for a pipeline decided meanwhile. */
  private async outcomeOf(traceId: string, reply: ParkReply): Promise<ParkOutcome> {
    switch (reply[0]) {
      case 'parked':
      case 'exists':
        return { kind: 'parked' };
      case 'decided':
        return { kind: 'decided', decision: decisionOf(reply[1]) };
      default: {
        if (reply[1] !== 'total_bytes') return { kind: 'full', limit: reply[1] as 'trace_spans' | 'trace_bytes' };
        // A pipeline decided already is not held to the budget of what waits (SPEC §11 "Bounds": before a decision only).
        const decision = await this.findDecision(traceId);
        return decision === null ? { kind: 'full', limit: 'total_bytes' } : { kind: 'decided', decision };
      }
    }
  }

  async noteFacts(traceId: string, facts: FactsUpdate, ttlMs: number): Promise<void> {
    const queue = Math.max(0, Math.round(facts.longestQueueMs ?? 0));
    const rootEnd = facts.rootEnd === null ? '-' : facts.rootEnd === undefined ? '' : JSON.stringify(facts.rootEnd);
    const fields: string[] = [];
    for (const status of facts.statuses ?? []) fields.push(`status:${status}`, '1');
    if (facts.childRunning !== undefined) fields.push(`child:${facts.childRunning}`, '1');
    if (facts.childEnded !== undefined) fields.push(`child:${facts.childEnded}`, '');
    for (const jobId of facts.finishedRootJobs ?? []) fields.push(`done:${jobId}`, '1');
    await this.store.guard(() =>
      this.scripts.noteFacts([OUTCOME_FACTS_KEY(traceId)], [ttlArgument(ttlMs), queue, facts.whenNoOutcome ?? '', rootEnd, ...fields]),
    );
  }

  async notePipelineJobStatuses(pipelineId: number, statuses: readonly string[], ttlMs: number): Promise<void> {
    if (statuses.length === 0) return;
    await this.store.guard(() => this.scripts.noteStatuses([PIPELINE_JOB_STATUSES_KEY(pipelineId)], [ttlArgument(ttlMs), ...statuses]));
  }

  async jobStatusesOf(pipelineId: number): Promise<string[]> {
    const statuses = await this.store.guard(() => this.store.client.smembers(PIPELINE_JOB_STATUSES_KEY(pipelineId)));
    return statuses.sort();
  }

  async readFacts(traceId: string): Promise<OutcomeFacts> {
    const stored = await this.store.guard(() => this.store.client.hgetall(OUTCOME_FACTS_KEY(traceId)));
    const fields = Object.keys(stored);
    const named = (prefix: string) => fields.filter((field) => field.startsWith(prefix)).map((field) => field.slice(prefix.length));
    const whenNoOutcome = stored.no_outcome === 'keep' || stored.no_outcome === 'drop' ? stored.no_outcome : undefined;
    return {
      statuses: named('status:').sort(),
      longestQueueMs: Number(stored.queue ?? 0),
      ...(whenNoOutcome === undefined ? {} : { whenNoOutcome }),
      ...(stored.root_end === undefined ? {} : { rootEnd: JSON.parse(stored.root_end) as RootOutcome }),
      runningChildren: named('child:')
        .map(Number)
        .sort((a, b) => a - b),
      finishedRootJobs: named('done:')
        .map(Number)
        .sort((a, b) => a - b),
    };
  }

  async decide(traceId: string, decision: TraceDecision, rememberMs: number): Promise<{ decision: TraceDecision; changed: boolean }> {
    const [recorded, changed] = await this.store.guard(async () => {
      const key = TRACE_DECISION_KEY(traceId);
      const reply = await this.scripts.decide([key], [encodeDecision(decision), ttlArgument(rememberMs)]);
      await this.store.replicated(key);
      return reply;
    });
    return { decision: decisionOf(recorded), changed: Number(changed) === 1 };
  }

  async reopen(traceId: string, holdMs: number): Promise<boolean> {
    const reopened = Number(await this.store.guard(() => this.scripts.reopen([TRACE_DECISION_KEY(traceId), OUTCOME_FACTS_KEY(traceId)], [])));
    // Undecided (a drop deferred for late child pipelines) or dropped: its time limit runs again from now.
    if (reopened !== 0) await this.schedule(traceId, Date.now() + holdMs);
    return reopened === 1;
  }

  async findDecision(traceId: string): Promise<TraceDecision | null> {
    const stored = await this.store.guard(() => this.store.client.get(TRACE_DECISION_KEY(traceId)));
    return stored === null ? null : decisionOf(stored);
  }

  async parkedIds(traceId: string): Promise<ParkedEntryId[]> {
    const fields = await this.store.guard(() => this.store.client.hkeys(PARKED_KEY(traceId)));
    return fields.map(parsedEntryId);
  }

  async parkedEntries(traceId: string, ids: readonly ParkedEntryId[]): Promise<ParkedEntry[]> {
    if (ids.length === 0) return [];
    const stored = await this.store.guard(() => this.store.client.hmgetBuffer(PARKED_KEY(traceId), ...ids.map(({ id }) => id)));
    const entries = await Promise.all(
      ids.map(async (id, i) => {
        const body = stored[i];
        if (body === null) return [];
        const unpacked = await unpackedBody(body, id.bytes);
        return [{ ...id, bytes: unpacked.length, body: unpacked }];
      }),
    );
    return entries.flat();
  }

  async release(traceId: string, entryIds: readonly string[]): Promise<void> {
    if (entryIds.length === 0) return;
    await this.store.guard(async () => {
      const [bytes, spans] = await this.scripts.parkingRelease([PARKED_KEY(traceId), PARKED_SIZE_KEY(traceId)], entryIds);
      if (Number(bytes) > 0 || Number(spans) > 0) await this.scripts.parkingGiveBack([PARKING_TOTAL_KEY], [traceId, bytes, spans]);
    });
  }

  async drop(traceId: string): Promise<void> {
    // UNLINK frees a large hash off Redis's main thread; the reservation comes back whole with finish().
    await this.store.guard(() => this.store.client.unlink(PARKED_KEY(traceId), PARKED_SIZE_KEY(traceId)));
  }

  async finish(traceId: string): Promise<void> {
    await this.store.guard(() => this.scripts.parkingFinish([PARKING_TOTAL_KEY, PARKING_OVERDUE_KEY], [traceId]));
  }

  async schedule(traceId: string, dueAt: number): Promise<void> {
    await this.store.guard(() => this.store.client.zadd(PARKING_OVERDUE_KEY, String(Math.round(dueAt)), traceId));
  }

  async claimOverdue(max: number, leaseMs: number): Promise<string[]> {
    return this.store.guard(() => this.scripts.claimOverdue([PARKING_OVERDUE_KEY], [Date.now(), max, Math.round(leaseMs)]));
  }

  async usage(): Promise<ParkingUsage> {
    const [[bytes, spans], traces] = await this.store.guard(() =>
      Promise.all([this.store.client.hmget(PARKING_TOTAL_KEY, 'bytes', 'spans'), this.store.client.zcard(PARKING_OVERDUE_KEY)]),
    );
    return { traces, spans: Math.max(0, Number(spans ?? 0)), bytes: Math.max(0, Number(bytes ?? 0)) };
  }
}
