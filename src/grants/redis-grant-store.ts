import { Grant, GrantStore, SaveGrantOptions, SpanLease, SpanLeaseRequest, StoreUnavailableError, WindowBlock } from './grant';
import {
  ClaimedSpan,
  EnqueueOutcome,
  OutboxDepth,
  OutboxLimits,
  OutboxSpan,
  MIN_TRACED_MEMORY_MS,
  Remembered,
  RunnerJobEnd,
  TracedJob,
  TracedPipeline,
} from './traced-work';
import { connectRedis, pingRedis, RedisClient, RedisConnectionEvents, RedisConnectionSettings } from './redis-connection';

/*
 * Key layout. Redis Cluster runs a multi-key command (MULTI, MGET, a script) only when all its keys
 * hash to one slot, and only the part between the first `{` and `}` is hashed. So every key of one
 * operation carries the same hash tag: a job's grant and revocation, and its span quota and span
 * rate, share `{job:<id>}`. The job-token index is looked up by digest alone, before the job is
 * known, so it lives in its own slot and is written beside the grant, never in the same transaction.
 * Rate windows and quotas are one key each, tagged by their own name so they spread over the cluster.
 */
const GRANT_KEY = (jobId: number) => `cjt:{job:${jobId}}:grant`;
const REVOKED_KEY = (jobId: number) => `cjt:{job:${jobId}}:revoked`;
const JOB_SPANS_KEY = (jobId: number) => `cjt:{job:${jobId}}:spans`;
const JOB_SPAN_RATE_KEY = (jobId: number) => `cjt:{job:${jobId}}:span-rate`;
const JOB_SPAN_LEASES_KEY = (jobId: number) => `cjt:{job:${jobId}}:span-leases`;
const JOB_TOKEN_KEY = (digest: string) => `cjt:{jobtoken:${digest}}`;
const RATE_KEY = (key: string) => `cjt:{rate:${key}}`;
/*
 * SPEC §10. A traced job sits in its job's slot, a traced pipeline in its own. The outbox is one slot,
 * `{outbox}`, so that enqueueing (dedup marker, entry, due time) is one atomic script on a cluster too:
 * it holds a few spans per job, not the export traffic, so one slot carries it.
 */
const TRACED_JOB_KEY = (jobId: number) => `cjt:{job:${jobId}}:traced`;
const TRACED_PIPELINE_KEY = (pipelineId: number) => `cjt:{pipeline:${pipelineId}}:traced`;
/** SPEC §10's final story: the highest version of a pipeline's span emitted, and its jobs' runner ends. */
const PIPELINE_SPAN_VERSION_KEY = (pipelineId: number) => `cjt:{pipeline:${pipelineId}}:span-version`;
const RUNNER_JOB_ENDS_KEY = (pipelineId: number) => `cjt:{pipeline:${pipelineId}}:runner-job-ends`;
const OUTBOX_DUE_KEY = 'cjt:{outbox}:due';
const OUTBOX_ENQUEUED_KEY = 'cjt:{outbox}:enqueued';
const OUTBOX_SPANS_KEY = 'cjt:{outbox}:spans';
const OUTBOX_ATTEMPTS_KEY = 'cjt:{outbox}:attempts';
const OUTBOX_SEEN_KEY = (spanId: string) => `cjt:{outbox}:seen:${spanId}`;
const OUTBOX_KEYS = [OUTBOX_DUE_KEY, OUTBOX_ENQUEUED_KEY, OUTBOX_SPANS_KEY, OUTBOX_ATTEMPTS_KEY] as const;

/** Sets a record whose life only ever grows: a shorter TTL than the one it has keeps the longer. */
const SET_LONGER = `
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
end
return 1
`;

/**
 * Raises a pipeline span's highest version to ARGV[1] (kept ARGV[2] ms) and answers the highest, as text:
 * versions are integers up to 2^53, exact in Lua's doubles but not as its integer replies' `%d`.
 */
const RAISE_VERSION = `
local kept = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > kept then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ARGV[1]
end
return redis.call('GET', KEYS[1])
`;

/** Adds one job's end (ARGV[1] job id, ARGV[2] JSON) to its pipeline's, kept at least ARGV[3] ms; answers them all. */
const RECORD_RUNNER_JOB_END = `
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return redis.call('HVALS', KEYS[1])
`;

/**
 * Enqueues spans never seen before while the outbox has room. KEYS: due, enqueued, spans, attempts,
 * then one seen-marker per span; ARGV: now, max spans, remember ms, then span id and text per span.
 */
const ENQUEUE_SPANS = `
local now = tonumber(ARGV[1])
local size = redis.call('ZCARD', KEYS[1])
local queued, duplicates, refused = 0, 0, 0
for i = 5, #KEYS do
  local spanId = ARGV[4 + (i - 5) * 2]
  if redis.call('EXISTS', KEYS[i]) == 1 then
    duplicates = duplicates + 1
  elseif size >= tonumber(ARGV[2]) then
    refused = refused + 1
  else
    redis.call('SET', KEYS[i], '1', 'PX', ARGV[3])
    redis.call('HSET', KEYS[3], spanId, ARGV[5 + (i - 5) * 2])
    redis.call('ZADD', KEYS[1], now, spanId)
    redis.call('ZADD', KEYS[2], now, spanId)
    size = size + 1
    queued = queued + 1
  end
end
return {queued, duplicates, refused}
`;

/** Claims due spans for ARGV[3] ms: answers id, text, attempts and enqueue time for each. */
const CLAIM_SPANS = `
local now = tonumber(ARGV[1])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local claimed = {}
for _, id in ipairs(ids) do
  local text = redis.call('HGET', KEYS[3], id)
  if text then
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), id)
    claimed[#claimed + 1] = id
    claimed[#claimed + 1] = text
    claimed[#claimed + 1] = redis.call('HGET', KEYS[4], id) or '0'
    claimed[#claimed + 1] = redis.call('ZSCORE', KEYS[2], id) or tostring(now)
  else
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
  end
end
return claimed
`;

const ACKNOWLEDGE_SPANS = `
for _, id in ipairs(ARGV) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('HDEL', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
end
return #ARGV
`;

/** Puts claimed spans back, due at ARGV[1]; a span acknowledged meanwhile stays gone. */
const RETRY_SPANS = `
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], tonumber(ARGV[1]), ARGV[i])
    redis.call('HINCRBY', KEYS[4], ARGV[i], 1)
  end
end
return 1
`;

/**
 * Takes back up to ARGV[1] spans of a job's quota, never below zero. DECRBY keeps the key's TTL, and a
 * key that has expired is not brought back (it would live forever without one).
 */
const RELEASE_SPANS = `
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local released = math.min(used, tonumber(ARGV[1]))
if released > 0 then redis.call('DECRBY', KEYS[1], released) end
return released
`;

/**
 * A block of a fixed window: grants min(ARGV[1], limit - count), charges it, starts the window on its first
 * charge; answers the grant and the window's time left.
 */
const TAKE_WINDOW_BLOCK = `
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
local granted = math.max(0, math.min(tonumber(ARGV[1]), tonumber(ARGV[2]) - count))
if granted > 0 then redis.call('INCRBY', KEYS[1], granted) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 and granted > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]); ttl = tonumber(ARGV[3]) end
if ttl < 0 then ttl = tonumber(ARGV[3]) end
return {granted, ttl}
`;

/** Gives back ARGV[1] hits of a window, never below zero; DECRBY keeps its TTL, an ended window stays ended. */
const RETURN_WINDOW_BLOCK = `
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
local back = math.min(count, tonumber(ARGV[1]))
if back > 0 then redis.call('DECRBY', KEYS[1], back) end
return back
`;

/**
 * One replica's lease on a job's spans. KEYS: quota, rate, leases (hash: replica -> "unspent:expiresAt").
 * ARGV: now, leaseId, spent, quotaWanted, rateWanted, perJob, perSecond, quotaTtlMs, leaseMs.
 * Leases that ran out (their replica stopped calling: it died) are taken back from the quota first; this
 * replica's own lease is settled (what it spent stays charged) and grows by what it is granted.
 */
const LEASE_SPANS = `
local now = tonumber(ARGV[1])
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local own = 0
local leases = redis.call('HGETALL', KEYS[3])
for i = 1, #leases, 2 do
  local amount, expiresAt = string.match(leases[i + 1], '^(%d+):(%d+)$')
  if tonumber(expiresAt) <= now then
    used = math.max(0, used - tonumber(amount))
    redis.call('HDEL', KEYS[3], leases[i])
  elseif leases[i] == ARGV[2] then
    own = tonumber(amount)
  end
end
own = math.max(0, own - tonumber(ARGV[3]))
local quotaGranted = math.max(0, math.min(tonumber(ARGV[4]), tonumber(ARGV[6]) - used))
used = used + quotaGranted
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('SET', KEYS[1], used, 'KEEPTTL')
elseif used > 0 then
  redis.call('SET', KEYS[1], used, 'PX', ARGV[8])
end
own = own + quotaGranted
if own > 0 then
  redis.call('HSET', KEYS[3], ARGV[2], own .. ':' .. (now + tonumber(ARGV[9])))
  if redis.call('PTTL', KEYS[3]) < 0 then redis.call('PEXPIRE', KEYS[3], ARGV[8]) end
else
  redis.call('HDEL', KEYS[3], ARGV[2])
end
local sent = tonumber(redis.call('GET', KEYS[2]) or '0')
local rateGranted = math.max(0, math.min(tonumber(ARGV[5]), tonumber(ARGV[7]) - sent))
if rateGranted > 0 then
  redis.call('INCRBY', KEYS[2], rateGranted)
  if redis.call('PTTL', KEYS[2]) < 0 then redis.call('PEXPIRE', KEYS[2], 1000) end
end
local rateTtl = redis.call('PTTL', KEYS[2])
if rateTtl < 0 then rateTtl = 1000 end
return {quotaGranted, rateGranted, rateTtl}
`;

/** Ends a replica's lease: gives back min(ARGV[2], its unspent) of the quota, never below zero, keeping the TTL. */
const RETURN_SPAN_LEASE = `
local lease = redis.call('HGET', KEYS[2], ARGV[1])
if not lease then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
local amount = tonumber(string.match(lease, '^(%d+):'))
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local back = math.min(used, amount, tonumber(ARGV[2]))
if back > 0 then redis.call('DECRBY', KEYS[1], back) end
return back
`;

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
 * and at least ARGV[5] ms (SPEC §10). Answers the outcome, the revocation time and the expiry kept.
 */
const SAVE_GRANT = `
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

/** What SAVE_GRANT answers: `absent` when the grant had already expired and none was stored before. */
type SaveGrantReply = ['created' | 'absent', string | null] | ['kept', string | null, string];

/** The store's Lua scripts as ioredis commands: sent by SHA (EVALSHA) after the first use, not as text. */
interface ScriptCommands {
  cjtSaveGrant(
    grantKey: string,
    revokedKey: string,
    tracedKey: string,
    grantJsonUpToExpiry: string,
    ttlMs: string,
    expiresAt: string,
    tracedJson: string,
    tracedMinTtlMs: string,
  ): Promise<SaveGrantReply>;
  cjtRevokeGrant(grantKey: string, revokedKey: string, revokedAt: string): Promise<string | null>;
  cjtReleaseSpans(spansKey: string, spans: string): Promise<number>;
  cjtSetLonger(key: string, value: string, ttlMs: string): Promise<number>;
  cjtTakeWindowBlock(key: string, wanted: string, limit: string, windowMs: string): Promise<[number, number]>;
  cjtReturnWindowBlock(key: string, count: string): Promise<number>;
  cjtLeaseSpans(quotaKey: string, rateKey: string, leasesKey: string, ...args: string[]): Promise<[number, number, number]>;
  cjtReturnSpanLease(quotaKey: string, leasesKey: string, leaseId: string, unspent: string): Promise<number>;
  cjtRaiseVersion(key: string, version: string, ttlMs: string): Promise<string>;
  cjtRecordRunnerJobEnd(key: string, jobId: string, endJson: string, ttlMs: string): Promise<string[]>;
  cjtEnqueueSpans(numberOfKeys: number, ...keysAndArgs: string[]): Promise<[number, number, number]>;
  cjtClaimSpans(due: string, enqueued: string, spans: string, attempts: string, now: string, max: string, leaseMs: string): Promise<string[]>;
  cjtAcknowledgeSpans(due: string, enqueued: string, spans: string, attempts: string, ...spanIds: string[]): Promise<number>;
  cjtRetrySpans(due: string, enqueued: string, spans: string, attempts: string, dueAt: string, ...spanIds: string[]): Promise<number>;
}

export class RedisGrantStore implements GrantStore {
  private readonly scripts: ScriptCommands;

  constructor(
    private readonly redis: RedisClient,
    private readonly durability: { readonly waitReplicas: number; readonly waitTimeoutMs: number } = { waitReplicas: 0, waitTimeoutMs: 0 },
  ) {
    redis.defineCommand('cjtSaveGrant', { numberOfKeys: 3, lua: SAVE_GRANT });
    redis.defineCommand('cjtRevokeGrant', { numberOfKeys: 2, lua: REVOKE_GRANT });
    redis.defineCommand('cjtReleaseSpans', { numberOfKeys: 1, lua: RELEASE_SPANS });
    redis.defineCommand('cjtSetLonger', { numberOfKeys: 1, lua: SET_LONGER });
    redis.defineCommand('cjtTakeWindowBlock', { numberOfKeys: 1, lua: TAKE_WINDOW_BLOCK });
    redis.defineCommand('cjtReturnWindowBlock', { numberOfKeys: 1, lua: RETURN_WINDOW_BLOCK });
    redis.defineCommand('cjtLeaseSpans', { numberOfKeys: 3, lua: LEASE_SPANS });
    redis.defineCommand('cjtReturnSpanLease', { numberOfKeys: 2, lua: RETURN_SPAN_LEASE });
    redis.defineCommand('cjtRaiseVersion', { numberOfKeys: 1, lua: RAISE_VERSION });
    redis.defineCommand('cjtRecordRunnerJobEnd', { numberOfKeys: 1, lua: RECORD_RUNNER_JOB_END });
    // The number of keys varies with the spans enqueued: given first on each call.
    redis.defineCommand('cjtEnqueueSpans', { lua: ENQUEUE_SPANS });
    redis.defineCommand('cjtClaimSpans', { numberOfKeys: 4, lua: CLAIM_SPANS });
    redis.defineCommand('cjtAcknowledgeSpans', { numberOfKeys: 4, lua: ACKNOWLEDGE_SPANS });
    redis.defineCommand('cjtRetrySpans', { numberOfKeys: 4, lua: RETRY_SPANS });
    this.scripts = redis as unknown as ScriptCommands;
  }

  /**
   * Connects, waiting at most `startWaitMs` for the first connection so the first pickups after a
   * start find Redis ready. Redis being down is not fatal: the service starts, reports not ready,
   * answers `degraded`, and ioredis keeps reconnecting.
   */
  static async open(settings: RedisConnectionSettings, events?: RedisConnectionEvents, startWaitMs = 2000): Promise<RedisGrantStore> {
    const redis = connectRedis(settings, events);
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, startWaitMs);
      redis.once('ready', () => {
        clearTimeout(timer);
        resolve();
      });
    });
    return new RedisGrantStore(redis, { waitReplicas: settings.waitReplicas ?? 0, waitTimeoutMs: settings.commandTimeoutMs });
  }

  async saveGrant(grant: Grant, tracedJob?: TracedJob, { indexJobToken = true }: SaveGrantOptions = {}): Promise<Grant> {
    const ttlMs = grant.expiresAt - Date.now();
    const { expiresAt, ...fields } = grant;
    const grantJsonUpToExpiry = `${JSON.stringify(fields).slice(0, -1)},"expiresAt":`;
    return this.guard(async () => {
      const grantKeys = [GRANT_KEY(grant.jobId), REVOKED_KEY(grant.jobId)] as const;
      // The index is another slot, so not part of the script; a lookup checks the grant's own digest,
      // so an index entry written without its grant (or outliving it) finds nothing.
      const index = indexJobToken && grant.jobTokenDigest !== undefined && ttlMs > 0 ? JOB_TOKEN_KEY(grant.jobTokenDigest) : undefined;
      // Both in the same tick: the auto-pipelining connection writes them at once, beside the
      // other pickups' commands of that event-loop turn (one write per node on a cluster).
      const [reply] = await Promise.all([
        this.scripts.cjtSaveGrant(
          ...grantKeys,
          TRACED_JOB_KEY(grant.jobId),
          grantJsonUpToExpiry,
          String(ttlMs),
          String(expiresAt),
          tracedJob === undefined ? '' : JSON.stringify(tracedJob),
          String(MIN_TRACED_MEMORY_MS),
        ),
        index === undefined ? undefined : this.redis.set(index, String(grant.jobId), 'PX', ttlMs),
      ]);
      const [outcome, revokedAt, keptExpiresAt] = reply;
      if (outcome === 'absent') return grant;
      const stored = outcome === 'kept' ? { ...grant, expiresAt: Number(keptExpiresAt) } : grant;
      // On a cluster the index may sit on another primary, with replicas of its own.
      await Promise.all([this.replicated(grantKeys[0]), index !== undefined && this.replicated(index)]);
      return revokedAt === null ? stored : { ...stored, revokedAt: Number(revokedAt) };
    });
  }

  async findGrant(jobId: number): Promise<Grant | null> {
    const [stored, revokedAt] = await this.guard(() => this.redis.mget(GRANT_KEY(jobId), REVOKED_KEY(jobId)));
    if (stored === null) return null;
    const grant = JSON.parse(stored) as Grant;
    return revokedAt === null ? grant : { ...grant, revokedAt: Number(revokedAt) };
  }

  async findGrantByJobTokenDigest(jobTokenDigest: string): Promise<Grant | null> {
    const jobId = await this.guard(() => this.redis.get(JOB_TOKEN_KEY(jobTokenDigest)));
    if (jobId === null) return null;
    const grant = await this.findGrant(Number(jobId));
    // A job picked up again with a new token leaves the old index entry behind until it expires.
    return grant?.jobTokenDigest === jobTokenDigest ? grant : null;
  }

  async revokeGrant(jobId: number, revokedAt: number): Promise<Grant | null> {
    const revoked = await this.guard(async () => {
      const stored = await this.scripts.cjtRevokeGrant(GRANT_KEY(jobId), REVOKED_KEY(jobId), String(revokedAt));
      if (stored !== null) await this.replicated(GRANT_KEY(jobId));
      return stored;
    });
    return revoked === null ? null : this.findGrant(jobId);
  }

  async takeWindowBlock(key: string, wanted: number, limit: number, windowMs: number): Promise<WindowBlock> {
    const [granted, ttl] = await this.guard(() => this.scripts.cjtTakeWindowBlock(RATE_KEY(key), String(wanted), String(limit), String(windowMs)));
    return { granted: Number(granted), resetInMs: Number(ttl) };
  }

  async returnWindowBlock(key: string, count: number): Promise<void> {
    if (count <= 0) return;
    await this.guard(() => this.scripts.cjtReturnWindowBlock(RATE_KEY(key), String(count)));
  }

  async leaseSpans(jobId: number, request: SpanLeaseRequest): Promise<SpanLease> {
    const [quotaGranted, rateGranted, rateTtl] = await this.guard(() =>
      this.scripts.cjtLeaseSpans(
        JOB_SPANS_KEY(jobId),
        JOB_SPAN_RATE_KEY(jobId),
        JOB_SPAN_LEASES_KEY(jobId),
        String(Date.now()),
        request.leaseId,
        String(Math.round(request.spent)),
        String(request.quotaWanted),
        String(request.rateWanted),
        String(request.limits.perJob),
        String(request.limits.perSecond),
        String(Math.max(1, Math.round(request.quotaTtlMs))),
        String(Math.max(1, Math.round(request.leaseMs))),
      ),
    );
    return { quotaGranted: Number(quotaGranted), rateGranted: Number(rateGranted), rateResetInMs: Number(rateTtl) };
  }

  async returnSpanLease(jobId: number, leaseId: string, unspent: number): Promise<void> {
    await this.guard(() => this.scripts.cjtReturnSpanLease(JOB_SPANS_KEY(jobId), JOB_SPAN_LEASES_KEY(jobId), leaseId, String(Math.max(0, unspent))));
  }

  async releaseSpans(jobId: number, spans: number): Promise<void> {
    if (spans <= 0) return;
    await this.guard(() => this.scripts.cjtReleaseSpans(JOB_SPANS_KEY(jobId), String(spans)));
  }

  async recordTracedPipelines(pipelines: readonly Remembered<TracedPipeline>[]): Promise<void> {
    // All in one tick: the auto-pipelining connection writes them at once (one write per node on a cluster).
    await this.guard(() =>
      Promise.all(
        pipelines.map(({ value: pipeline, ttlMs }) =>
          this.scripts.cjtSetLonger(TRACED_PIPELINE_KEY(pipeline.pipelineId), JSON.stringify(pipeline), String(Math.max(1, Math.round(ttlMs)))),
        ),
      ),
    );
  }

  async findTracedJob(jobId: number): Promise<TracedJob | null> {
    const stored = await this.guard(() => this.redis.get(TRACED_JOB_KEY(jobId)));
    return stored === null ? null : (JSON.parse(stored) as TracedJob);
  }

  async findTracedPipeline(pipelineId: number): Promise<TracedPipeline | null> {
    const stored = await this.guard(() => this.redis.get(TRACED_PIPELINE_KEY(pipelineId)));
    return stored === null ? null : (JSON.parse(stored) as TracedPipeline);
  }

  async raisePipelineSpanVersion(pipelineId: number, version: number, ttlMs: number): Promise<number> {
    const ttl = String(Math.max(1, Math.round(ttlMs)));
    return Number(await this.guard(() => this.scripts.cjtRaiseVersion(PIPELINE_SPAN_VERSION_KEY(pipelineId), String(version), ttl)));
  }

  async recordRunnerJobEnd(pipelineId: number, end: RunnerJobEnd, ttlMs: number): Promise<RunnerJobEnd[]> {
    const ttl = String(Math.max(1, Math.round(ttlMs)));
    const ends = await this.guard(() => this.scripts.cjtRecordRunnerJobEnd(RUNNER_JOB_ENDS_KEY(pipelineId), String(end.jobId), JSON.stringify(end), ttl));
    return ends.map((stored) => JSON.parse(stored) as RunnerJobEnd);
  }

  async enqueueSpans(spans: readonly OutboxSpan[], limits: OutboxLimits): Promise<EnqueueOutcome> {
    if (spans.length === 0) return { queued: 0, duplicates: 0, refused: 0 };
    const keys = [...OUTBOX_KEYS, ...spans.map((span) => OUTBOX_SEEN_KEY(span.spanId))];
    const args = [String(Date.now()), String(limits.maxSpans), String(Math.max(1, Math.round(limits.rememberMs)))];
    for (const span of spans) args.push(span.spanId, span.resourceSpans);
    const [queued, duplicates, refused] = await this.guard(() => this.scripts.cjtEnqueueSpans(keys.length, ...keys, ...args));
    return { queued: Number(queued), duplicates: Number(duplicates), refused: Number(refused) };
  }

  async claimSpans(max: number, leaseMs: number): Promise<ClaimedSpan[]> {
    const reply = await this.guard(() => this.scripts.cjtClaimSpans(...OUTBOX_KEYS, String(Date.now()), String(max), String(Math.round(leaseMs))));
    const claimed: ClaimedSpan[] = [];
    for (let i = 0; i + 3 < reply.length; i += 4) {
      claimed.push({ spanId: reply[i], resourceSpans: reply[i + 1], attempts: Number(reply[i + 2]), enqueuedAt: Number(reply[i + 3]) });
    }
    return claimed;
  }

  async acknowledgeSpans(spanIds: readonly string[]): Promise<void> {
    if (spanIds.length === 0) return;
    await this.guard(() => this.scripts.cjtAcknowledgeSpans(...OUTBOX_KEYS, ...spanIds));
  }

  async retrySpans(spanIds: readonly string[], delayMs: number): Promise<void> {
    if (spanIds.length === 0) return;
    await this.guard(() => this.scripts.cjtRetrySpans(...OUTBOX_KEYS, String(Date.now() + Math.round(delayMs)), ...spanIds));
  }

  async outboxDepth(): Promise<OutboxDepth> {
    const [spans, oldest] = await this.guard(() =>
      Promise.all([this.redis.zcard(OUTBOX_ENQUEUED_KEY), this.redis.zrange(OUTBOX_ENQUEUED_KEY, 0, 0, 'WITHSCORES')]),
    );
    return { spans, ...(oldest.length < 2 ? {} : { oldestEnqueuedAt: Number(oldest[1]) }) };
  }

  async ping(): Promise<void> {
    await this.guard(() => pingRedis(this.redis));
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }

  /**
   * With REDIS_WAIT_REPLICAS, resolves once that many replicas have every write this connection made
   * so far (Redis WAIT), including the grant write just acknowledged; a write they did not confirm
   * within the command timeout counts as not stored (SPEC §7, failover). The key only routes WAIT
   * to the primary that took the write, on a cluster.
   */
  private async replicated(routingKey: string): Promise<void> {
    const { waitReplicas, waitTimeoutMs } = this.durability;
    if (waitReplicas === 0) return;
    const results = await this.redis.pipeline().exists(routingKey).wait(waitReplicas, waitTimeoutMs).exec();
    const [error, acknowledged] = results?.[1] ?? [new Error('no answer to WAIT'), 0];
    if (error !== null) throw error;
    if (Number(acknowledged) < waitReplicas) {
      throw new Error(`write reached ${Number(acknowledged)} of ${waitReplicas} replicas within ${waitTimeoutMs} ms`);
    }
  }

  private async guard<T>(operation: () => Promise<T>): Promise<T> {
    try {
      return await operation();
    } catch (error) {
      // ioredis refuses a command while disconnected with "Stream isn't writeable and enableOfflineQueue
      // options is false", which says nothing to whoever reads it in a log.
      throw new StoreUnavailableError(this.redis.status === 'ready' ? error : new Error(`not connected (${this.redis.status})`, { cause: error }));
    }
  }
}
