import { luaScript } from '../store/redis-scripts';

/**
 * What saveGrant answers: `absent` when the grant had already expired and none was stored before; `kept` with the
 * expiry of the first pickup, kept.
 */
export type SaveGrantReply = ['created' | 'absent', string | null] | ['kept', string | null, string];

/** The grant store's scripts (redis-grant-store.ts), each one step on a job's slot. */
export const GRANT_SCRIPTS = {
  /**
   * A pickup's grant write (SPEC §4: re-decorating keeps the expiry and never lifts a revocation) in one step, so a
   * grant that expires meanwhile is never brought back. The first pickup sets the record with its expiry (PX, NX); a
   * later one replaces the fields but keeps the first expiry, both in the JSON and as the key's own TTL (KEEPTTL). The
   * grant's JSON is given up to the value of its last member, `expiresAt`: only that number is taken from the stored
   * record, so no id goes through Lua's cjson, which would round those above 10^14 when encoding. The traced job (none
   * when its JSON is empty) is set in the same step, the job's slot too, to live as long as the grant as stored and at
   * least `minTracedMs` (SPEC §10): one script rather than a second write per pickup, a measured win. The job-token
   * index, when given, is set for the pickup's own TTL as the separate write would set it: only outside a cluster,
   * where a script may touch any key; on a cluster it is another slot and written beside the script. Answers the
   * outcome, the revocation time and the expiry kept.
   */
  saveGrant: luaScript<
    [grant: string, revoked: string, tracedJob: string] | [grant: string, revoked: string, tracedJob: string, jobTokenIndex: string],
    [grantJsonUpToExpiry: string, ttlMs: number, expiresAt: number, tracedJobJson: string, minTracedMs: number, jobId: number],
    SaveGrantReply
  >({
    keys: 'variable',
    lua: `
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
`,
  }),

  /**
   * Records the revocation time beside the grant, living exactly as long as the grant, in one step with reading the
   * grant's TTL and the revocation kept: an earlier revocation is never pushed later. A key of its own rather than a
   * rewrite of the grant's JSON: Lua's cjson would round ids above 10^14. Answers the revocation kept, or nil when the
   * grant is gone.
   */
  revokeGrant: luaScript<[grant: string, revoked: string], [revokedAt: number], string | null>({
    keys: 2,
    lua: `
local ttl = redis.call('PTTL', KEYS[1])
if ttl <= 0 then return false end
local current = redis.call('GET', KEYS[2])
if current and tonumber(current) <= tonumber(ARGV[1]) then return current end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ttl)
return ARGV[1]
`,
  }),

  /**
   * Takes back what one saveGrant wrote, in one step with checking it is that write's: only if the traced job is that
   * write's (its JSON, with the pickup's time) and the grant still ends at that write's expiry, so a grant that kept an
   * earlier pickup's expiry, or another pickup's record, stays. The job-token index is left: a lookup by digest checks
   * the grant, which is gone.
   */
  withdrawGrant: luaScript<[grant: string, tracedJob: string], [tracedJobJson: string, expiresAt: number], number>({
    keys: 2,
    lua: `
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, -(#ARGV[2] + 2)) ~= ':' .. ARGV[2] .. '}' then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
`,
  }),
};
