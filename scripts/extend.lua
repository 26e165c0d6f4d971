-- extend.lua: move the lease of a lock that is still ours.
--
-- KEYS[1]  lock key
-- ARGV[1]  owner value
-- ARGV[2]  new TTL in milliseconds
--
-- Returns 1 when the lease was moved, 0 when the key is gone or belongs to
-- another owner. It never creates a key: an expired lock stays expired.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
