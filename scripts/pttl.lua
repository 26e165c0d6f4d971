-- pttl.lua: the remaining lease of a lock that is still ours.
--
-- KEYS[1]  lock key
-- ARGV[1]  owner value
--
-- Returns the key's PTTL in milliseconds when it holds ARGV[1] (-1 if it has
-- no expiry), or REPLY_NOT_OURS when the key is gone or belongs to another
-- owner (reply codes: the table in scripts.go; none is a lease).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return REPLY_NOT_OURS
