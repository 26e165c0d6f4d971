-- release.lua: delete the lock only if it is still ours.
--
-- KEYS[1]  lock key
-- ARGV[1]  owner value
--
-- Returns 1 when our key was deleted, 0 when the key is gone or belongs to
-- another owner (which is then left untouched).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
