import { luaScript } from '../store/redis-scripts';

/**
 * The traced-work store's scripts (redis-traced-work-store.ts): each reads a record and writes it in one step, so two
 * replicas that write at once never undo each other (a longer life shortened, a higher version lowered).
 */
export const TRACED_WORK_SCRIPTS = {
  /**
   * Sets a pipeline's record whose life only ever grows: a shorter TTL than the one it has keeps the longer. As
   * pipelineRecordAfter in traced-work.ts: another project's record stays as it is, unless it is a guess (`asRoot`)
   * and this one the pipeline's own; within a project an own record is not made a guess again.
   */
  setPipeline: luaScript<[pipeline: string], [pipelineJson: string, ttlMs: number], number>({
    keys: 1,
    lua: `
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
`,
  }),

  /**
   * Raises a pipeline span's highest version and answers the highest before and after, as text: versions are integers
   * up to 2^53, exact in Lua's doubles but not as its integer replies' `%d`.
   */
  raiseVersion: luaScript<[version: string], [version: number, ttlMs: number], [before: string, highest: string]>({
    keys: 1,
    lua: `
local before = redis.call('GET', KEYS[1]) or '0'
if tonumber(ARGV[1]) > tonumber(before) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {before, ARGV[1]}
end
return {before, before}
`,
  }),

  /** Keeps a value unless one is kept already; answers the value kept: the first one stands. */
  pin: luaScript<[record: string], [value: string, ttlMs: number], string>({
    keys: 1,
    lua: `
local kept = redis.call('GET', KEYS[1])
if kept then return kept end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ARGV[1]
`,
  }),

  /** Adds one job's end to its pipeline's, kept at least ttlMs, and answers them all in the same step: whoever records the last end sees every end. */
  recordRunnerJobEnd: luaScript<[ends: string], [jobId: number, endJson: string, ttlMs: number], string[]>({
    keys: 1,
    lua: `
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return redis.call('HVALS', KEYS[1])
`,
  }),

  /** Sets chapters (key, text, key, text, …) of a root pipeline's story, kept at least ttlMs. */
  recordStory: luaScript<[story: string], [ttlMs: number, ...chapters: string[]], number>({
    keys: 1,
    lua: `
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return 1
`,
  }),

  /** Keeps a pipeline's end for ttlMs, unless the one kept ended later. */
  recordEnd: luaScript<[end: string], [endJson: string, ttlMs: number], number>({
    keys: 1,
    lua: `
local kept = redis.call('GET', KEYS[1])
if kept and cjson.decode(kept)['end'].finishedAt > cjson.decode(ARGV[1])['end'].finishedAt then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`,
  }),
};
