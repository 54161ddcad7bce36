import {
  OUTBOX_ATTEMPTS_KEY,
  OUTBOX_DUE_KEY,
  OUTBOX_ENQUEUED_KEY,
  OUTBOX_SEEN_KEY,
  OUTBOX_SPANS_KEY,
  PIPELINE_SPAN_VERSION_KEY,
  RUNNER_JOB_ENDS_KEY,
  TRACED_JOB_KEY,
  TRACED_PIPELINE_KEY,
} from '../store/redis-keys';
import { RedisStore } from '../store/redis-store';
import {
  ClaimedSpan,
  EnqueueOutcome,
  OutboxDepth,
  OutboxLimits,
  OutboxSpan,
  Remembered,
  RunnerJobEnd,
  TracedJob,
  TracedPipeline,
  TracedWorkStore,
} from './traced-work';

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

/** The traced-work scripts as ioredis commands: sent by SHA (EVALSHA) after the first use, not as text. */
interface TracedWorkScripts {
  cjtSetLonger(key: string, value: string, ttlMs: string): Promise<number>;
  cjtRaiseVersion(key: string, version: string, ttlMs: string): Promise<string>;
  cjtRecordRunnerJobEnd(key: string, jobId: string, endJson: string, ttlMs: string): Promise<string[]>;
  cjtEnqueueSpans(numberOfKeys: number, ...keysAndArgs: string[]): Promise<[number, number, number]>;
  cjtClaimSpans(due: string, enqueued: string, spans: string, attempts: string, now: string, max: string, leaseMs: string): Promise<string[]>;
  cjtAcknowledgeSpans(due: string, enqueued: string, spans: string, attempts: string, ...spanIds: string[]): Promise<number>;
  cjtRetrySpans(due: string, enqueued: string, spans: string, attempts: string, dueAt: string, ...spanIds: string[]): Promise<number>;
}

export class RedisTracedWorkStore implements TracedWorkStore {
  private readonly scripts: TracedWorkScripts;

  constructor(private readonly store: RedisStore) {
    const redis = store.client;
    redis.defineCommand('cjtSetLonger', { numberOfKeys: 1, lua: SET_LONGER });
    redis.defineCommand('cjtRaiseVersion', { numberOfKeys: 1, lua: RAISE_VERSION });
    redis.defineCommand('cjtRecordRunnerJobEnd', { numberOfKeys: 1, lua: RECORD_RUNNER_JOB_END });
    // The number of keys varies with the spans enqueued: given first on each call.
    redis.defineCommand('cjtEnqueueSpans', { lua: ENQUEUE_SPANS });
    redis.defineCommand('cjtClaimSpans', { numberOfKeys: 4, lua: CLAIM_SPANS });
    redis.defineCommand('cjtAcknowledgeSpans', { numberOfKeys: 4, lua: ACKNOWLEDGE_SPANS });
    redis.defineCommand('cjtRetrySpans', { numberOfKeys: 4, lua: RETRY_SPANS });
    this.scripts = redis as unknown as TracedWorkScripts;
  }

  async recordTracedPipelines(pipelines: readonly Remembered<TracedPipeline>[]): Promise<void> {
    // All in one tick: the auto-pipelining connection writes them at once (one write per node on a cluster).
    await this.store.guard(() =>
      Promise.all(
        pipelines.map(({ value: pipeline, ttlMs }) =>
          this.scripts.cjtSetLonger(TRACED_PIPELINE_KEY(pipeline.pipelineId), JSON.stringify(pipeline), String(Math.max(1, Math.round(ttlMs)))),
        ),
      ),
    );
  }

  async findTracedJob(jobId: number): Promise<TracedJob | null> {
    const stored = await this.store.guard(() => this.store.client.get(TRACED_JOB_KEY(jobId)));
    return stored === null ? null : (JSON.parse(stored) as TracedJob);
  }

  async findTracedPipeline(pipelineId: number): Promise<TracedPipeline | null> {
    const stored = await this.store.guard(() => this.store.client.get(TRACED_PIPELINE_KEY(pipelineId)));
    return stored === null ? null : (JSON.parse(stored) as TracedPipeline);
  }

  async raisePipelineSpanVersion(pipelineId: number, version: number, ttlMs: number): Promise<number> {
    const ttl = String(Math.max(1, Math.round(ttlMs)));
    return Number(await this.store.guard(() => this.scripts.cjtRaiseVersion(PIPELINE_SPAN_VERSION_KEY(pipelineId), String(version), ttl)));
  }

  async recordRunnerJobEnd(pipelineId: number, end: RunnerJobEnd, ttlMs: number): Promise<RunnerJobEnd[]> {
    const ttl = String(Math.max(1, Math.round(ttlMs)));
    const ends = await this.store.guard(() => this.scripts.cjtRecordRunnerJobEnd(RUNNER_JOB_ENDS_KEY(pipelineId), String(end.jobId), JSON.stringify(end), ttl));
    return ends.map((stored) => JSON.parse(stored) as RunnerJobEnd);
  }

  async enqueueSpans(spans: readonly OutboxSpan[], limits: OutboxLimits): Promise<EnqueueOutcome> {
    if (spans.length === 0) return { queued: 0, duplicates: 0, refused: 0 };
    const keys = [...OUTBOX_KEYS, ...spans.map((span) => OUTBOX_SEEN_KEY(span.spanId))];
    const args = [String(Date.now()), String(limits.maxSpans), String(Math.max(1, Math.round(limits.rememberMs)))];
    for (const span of spans) args.push(span.spanId, span.resourceSpans);
    const [queued, duplicates, refused] = await this.store.guard(() => this.scripts.cjtEnqueueSpans(keys.length, ...keys, ...args));
    return { queued: Number(queued), duplicates: Number(duplicates), refused: Number(refused) };
  }

  async claimSpans(max: number, leaseMs: number): Promise<ClaimedSpan[]> {
    const reply = await this.store.guard(() => this.scripts.cjtClaimSpans(...OUTBOX_KEYS, String(Date.now()), String(max), String(Math.round(leaseMs))));
    const claimed: ClaimedSpan[] = [];
    for (let i = 0; i + 3 < reply.length; i += 4) {
      claimed.push({ spanId: reply[i], resourceSpans: reply[i + 1], attempts: Number(reply[i + 2]), enqueuedAt: Number(reply[i + 3]) });
    }
    return claimed;
  }

  async acknowledgeSpans(spanIds: readonly string[]): Promise<void> {
    if (spanIds.length === 0) return;
    await this.store.guard(() => this.scripts.cjtAcknowledgeSpans(...OUTBOX_KEYS, ...spanIds));
  }

  async retrySpans(spanIds: readonly string[], delayMs: number): Promise<void> {
    if (spanIds.length === 0) return;
    await this.store.guard(() => this.scripts.cjtRetrySpans(...OUTBOX_KEYS, String(Date.now() + Math.round(delayMs)), ...spanIds));
  }

  async outboxDepth(): Promise<OutboxDepth> {
    const [spans, oldest] = await this.store.guard(() =>
      Promise.all([this.store.client.zcard(OUTBOX_ENQUEUED_KEY), this.store.client.zrange(OUTBOX_ENQUEUED_KEY, 0, 0, 'WITHSCORES')]),
    );
    return { spans, ...(oldest.length < 2 ? {} : { oldestEnqueuedAt: Number(oldest[1]) }) };
  }
}
