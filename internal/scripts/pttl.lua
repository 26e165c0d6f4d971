-- pttl.lua: the remaining lease of a lock that is still ours.
--
-- KEYS[1]  lock key
-- ARGV[1]  owner value
--
-- Returns the key's PTTL in milliseconds when it holds ARGV[1] (-1 if it has
-- no expiry), REPLY_OTHERS when the key holds another owner's value, or
-- REPLY_NOT_OURS when it is gone (reply codes: the table in scripts.go; none
-- is a lease).
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
if v then return REPLY_OTHERS end
return REPLY_NOT_OURS
