-- rlock.lua: take a read hold on a name: shared with other read holds,
-- never with a writer, and not while a writer waits (writer preference).
--
-- KEYS[1]  lock key        "{<prefix><name>}" (the writer's, acquire.lua);
--                          holds readMark while read holds are live, so
--                          that a writer's SET NX fails with no read of
--                          the holds, expiring with the longest lease
-- KEYS[2]  read holds      "{<prefix><name>}:readers": a sorted set of
--                          owner values scored by the end of their lease
--                          (server time in ms), the key itself expiring with
--                          the longest lease
-- KEYS[3]  the queue of waiting writers "{<prefix><name>}:queue" (_lib.lua)
-- KEYS[4]  the waiting mark "{<prefix><name>}:waiting" (_lib.lua), set when
--          refused: the reader waits for the writer's release
-- ARGV[1]  owner value of this read hold (a fresh UUID per attempt)
-- ARGV[2]  TTL in milliseconds
--
-- Returns {REPLY_OK, 0} when the read hold is ours (also for a client-side
-- retry of this attempt), {REPLY_TAKEN, pttl, owner} when a writer holds
-- the name (its lease and owner value; "queued:<id>" while it is reserved
-- for a waiting writer), or {REPLY_TAKEN, ms, ""} when a writer waits (ms:
-- until its entry lapses unless it tries again). Reply codes: the table in
-- scripts.go. Each read hold has a lease of its own: one live reader never
-- keeps a crashed one's hold alive.
local now = nowms()
local mine = redis.call('ZSCORE', KEYS[2], ARGV[1])
if mine and tonumber(mine) > now then return {REPLY_OK, 0} end
local w = redis.call('GET', KEYS[1])
if w and w ~= VALUE_READ_MARK then
  local pttl = redis.call('PTTL', KEYS[1])
  waiting(KEYS[4], pttl)
  return {REPLY_TAKEN, pttl, w}
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  local first, left = firstwaiter(KEYS[3])
  if first then
    waiting(KEYS[4], left)
    return {REPLY_TAKEN, left, ''}
  end
end
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
if not w then
  redis.call('SET', KEYS[1], VALUE_READ_MARK, 'PX', ttl)
elseif redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return {REPLY_OK, 0}
