-- zextend.lua: move the lease of a read hold or a permit that is still ours.
--
-- KEYS[1]  the sorted set of holds (rlock.lua, sem_acquire.lua)
-- KEYS[2]  (not used: the hold's released marker, passed along with KEYS[3])
-- KEYS[3]  a permit's count key "<set key>:permits" (sem_acquire.lua), kept
--          alive as long as the set; absent for a read hold. With it, the
--          permits' fence counter "<set key>:fence" (kinds.go's
--          fenceSuffix) is kept alive at least as long as the new lease
--          (keepcounter, _lib.lua)
-- ARGV[1]  owner value
-- ARGV[2]  new TTL in milliseconds
-- ARGV[3]  guard in milliseconds: a lease with less than this left is not
--          moved (Lock.guardMillis: its holder has declared it lost by now;
--          a renewal that a paused server runs late must not revive it);
--          absent: no guard
--
-- Returns REPLY_OK when the lease was moved, REPLY_GONE when the hold is
-- gone or its lease already ended (its entry is then removed: an expired
-- hold stays expired), REPLY_LATE when it is ours but too near its end
-- (ARGV[3]). Reply codes: the table in scripts.go.
local now = nowms()
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return REPLY_GONE end
if tonumber(s) <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return REPLY_GONE
end
if ARGV[3] and tonumber(s) - now < tonumber(ARGV[3]) then return REPLY_LATE end
local ttl = tonumber(ARGV[2])
-- ZREM first: at maxmemory (noeviction) Redis refuses a script's first
-- write that may grow memory (ZADD), but not one after a write that cannot,
-- so the renewal goes through on a full server (see scripts.go).
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
if KEYS[3] then
  redis.call('PEXPIRE', KEYS[3], redis.call('PTTL', KEYS[1]))
  keepcounter(KEYS[1] .. SUFFIX_FENCE, ttl)
end
return REPLY_OK
