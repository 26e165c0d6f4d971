-- release.lua: delete the lock only if it is still ours, and tell waiters.
--
-- KEYS[1]  lock key
-- ARGV[1]  owner value
-- ARGV[2]  release channel "<lock key>:rel"
--
-- Returns 1 when our key was deleted (and the owner published on ARGV[2], so
-- waiters wake at once instead of polling), 0 when the key is gone or belongs
-- to another owner (which is then left untouched, and nothing is published).
--
-- PUBLISH rather than SPUBLISH: it works on every server and on Cluster
-- (where it is broadcast over the cluster bus).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], ARGV[1])
  return 1
end
return 0
