import {
  HEAD_DECISION_KEY,
  PIPELINE_END_KEY,
  PIPELINE_SPAN_VERSION_KEY,
  RUNNER_JOB_ENDS_KEY,
  TRACE_STORY_KEY,
  TRACED_JOB_KEY,
  TRACED_PIPELINE_KEY,
} from '../store/redis-keys';
import { RedisStore } from '../store/redis-store';
import { HeadDecision, PipelineEndSeen, Remembered, RunnerJobEnd, StoryChapter, TracedJob, TracedPipeline, TracedWorkStore } from './traced-work';

/**
 * Sets a pipeline's record (ARGV[1], JSON) whose life only ever grows: a shorter TTL than the one it has keeps the
 * longer. As pipelineRecordAfter in traced-work.ts: another project's record stays as it is, unless it is a guess
 * (`asRoot`) and this one the pipeline's own; within a project an own record is not made a guess again.
 */
const SET_PIPELINE = `
local value = ARGV[1]
local kept = redis.call('GET', KEYS[1])
if kept then
  local old = cjson.decode(kept)
  local new = cjson.decode(value)
  if old.projectId ~= new.projectId then
    if not (old.asRoot == true and new.asRoot ~= true) then return 0 end
  elseif old.asRoot ~= true and new.asRoot == true then
    value = kept
  end
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
else
  redis.call('SET', KEYS[1], value, 'KEEPTTL')
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

/** Keeps ARGV[1] (ARGV[2] ms) unless a value is kept already; answers the value kept. */
const PIN = `
local kept = redis.call('GET', KEYS[1])
if kept then return kept end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ARGV[1]
`;

/** Adds one job's end (ARGV[1] job id, ARGV[2] JSON) to its pipeline's, kept at least ARGV[3] ms; answers them all. */
const RECORD_RUNNER_JOB_END = `
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return redis.call('HVALS', KEYS[1])
`;

/** Sets chapters (ARGV[2..]: key, text, key, text, …) of a root pipeline's story, kept at least ARGV[1] ms. */
const RECORD_STORY = `
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return 1
`;

/** Keeps a pipeline's end (ARGV[1], JSON) for ARGV[2] ms, unless the one kept ended later. */
const RECORD_END = `
local kept = redis.call('GET', KEYS[1])
if kept and cjson.decode(kept)['end'].finishedAt > cjson.decode(ARGV[1])['end'].finishedAt then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`;

/** The traced-work scripts as ioredis commands: sent by SHA (EVALSHA) after the first use, not as text. */
interface TracedWorkScripts {
  cjtSetPipeline(key: string, value: string, ttlMs: string): Promise<number>;
  cjtRaiseVersion(key: string, version: string, ttlMs: string): Promise<string>;
  cjtPin(key: string, value: string, ttlMs: string): Promise<string>;
  cjtRecordRunnerJobEnd(key: string, jobId: string, endJson: string, ttlMs: string): Promise<string[]>;
  cjtRecordStory(key: string, ttlMs: string, ...chapters: string[]): Promise<number>;
  cjtRecordEnd(key: string, ended: string, ttlMs: string): Promise<number>;
}

export class RedisTracedWorkStore implements TracedWorkStore {
  private readonly scripts: TracedWorkScripts;

  constructor(private readonly store: RedisStore) {
    const redis = store.client;
    redis.defineCommand('cjtSetPipeline', { numberOfKeys: 1, lua: SET_PIPELINE });
    redis.defineCommand('cjtRaiseVersion', { numberOfKeys: 1, lua: RAISE_VERSION });
    redis.defineCommand('cjtPin', { numberOfKeys: 1, lua: PIN });
    redis.defineCommand('cjtRecordRunnerJobEnd', { numberOfKeys: 1, lua: RECORD_RUNNER_JOB_END });
    redis.defineCommand('cjtRecordStory', { numberOfKeys: 1, lua: RECORD_STORY });
    redis.defineCommand('cjtRecordEnd', { numberOfKeys: 1, lua: RECORD_END });
    this.scripts = redis as unknown as TracedWorkScripts;
  }

  async recordTracedPipelines(pipelines: readonly Remembered<TracedPipeline>[]): Promise<void> {
    // A batch of pickups holds a few pipelines (a root and its children): a write each, all awaited together.
    await this.store.guard(() =>
      Promise.all(
        pipelines.map(({ value: pipeline, ttlMs }) =>
          this.scripts.cjtSetPipeline(TRACED_PIPELINE_KEY(pipeline.pipelineId), JSON.stringify(pipeline), String(Math.max(1, Math.round(ttlMs)))),
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

  async pinHeadDecision(rootPipelineId: number, proposed: HeadDecision, ttlMs: number): Promise<HeadDecision> {
    const ttl = String(Math.max(1, Math.round(ttlMs)));
    const kept = await this.store.guard(() => this.scripts.cjtPin(HEAD_DECISION_KEY(rootPipelineId), JSON.stringify(proposed), ttl));
    return JSON.parse(kept) as HeadDecision;
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

  async recordTraceStory(rootPipelineId: number, chapters: readonly StoryChapter[], ttlMs: number): Promise<void> {
    if (chapters.length === 0) return;
    const ttl = String(Math.max(1, Math.round(ttlMs)));
    const flat = chapters.flatMap(({ key, text }) => [key, text]);
    await this.store.guard(() => this.scripts.cjtRecordStory(TRACE_STORY_KEY(rootPipelineId), ttl, ...flat));
  }

  async traceStory(rootPipelineId: number): Promise<string[]> {
    return this.store.guard(() => this.store.client.hvals(TRACE_STORY_KEY(rootPipelineId)));
  }

  async recordPipelineEnd(pipelineId: number, ended: PipelineEndSeen, ttlMs: number): Promise<void> {
    const ttl = String(Math.max(1, Math.round(ttlMs)));
    await this.store.guard(() => this.scripts.cjtRecordEnd(PIPELINE_END_KEY(pipelineId), JSON.stringify(ended), ttl));
  }

  async pipelineEnd(pipelineId: number): Promise<PipelineEndSeen | null> {
    const stored = await this.store.guard(() => this.store.client.get(PIPELINE_END_KEY(pipelineId)));
    return stored === null ? null : (JSON.parse(stored) as PipelineEndSeen);
  }
}
