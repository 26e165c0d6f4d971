-- zextend.lua: move the lease of a read hold or a permit that is still ours.
--
-- KEYS[1]  the sorted set of holds (rlock.lua, sem_acquire.lua); its only
--          key (see extend.lua): a permit's count key and the permits'
--          fence counter are kept apart, by keep.lua
-- ARGV[1]  owner value
-- ARGV[2]  new TTL in milliseconds
-- ARGV[3]  guard in milliseconds: a lease with less than this left is not
--          moved (Lock.guardMillis: its holder has declared it lost by now;
--          a renewal that a paused server runs late must not revive it);
--          absent: no guard
-- ARGV[4]  present: read the keys again after moving their leases (see
--          extend.lua)
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
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
  if ARGV[4] then redis.call('PTTL', KEYS[1]) end
end
return REPLY_OK
