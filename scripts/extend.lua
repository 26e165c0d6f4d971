-- extend.lua: move the lease of a lock that is still ours.
--
-- KEYS[1]  lock key
-- KEYS[2]  the lock's metadata key, when it has metadata (moved with it)
-- ARGV[1]  owner value
-- ARGV[2]  new TTL in milliseconds
--
-- Returns 1 when the lease was moved, 0 when the key is gone, 2 when it
-- belongs to another owner (so a loss can say which). It never creates a
-- key: an expired lock stays expired.
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  if KEYS[2] then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if cur then return 2 end
return 0
