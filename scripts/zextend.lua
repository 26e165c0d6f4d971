-- zextend.lua: move the lease of a read hold or a permit that is still ours.
--
-- KEYS[1]  the sorted set of holds (rlock.lua, sem_acquire.lua)
-- ARGV[1]  owner value
-- ARGV[2]  new TTL in milliseconds
--
-- Returns 1 when the lease was moved, 0 when the hold is gone or its lease
-- already ended (its entry is then removed: an expired hold stays expired).
local now = nowms()
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return 0 end
if tonumber(s) <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
