-- multi_pttl.lua: the remaining lease of a multi-name lock: the shortest of
-- its names' leases, while every one is still ours.
--
-- KEYS     the lock keys of the names
-- ARGV[1]  owner value
--
-- Returns the shortest PTTL in milliseconds (-1 if no key has an expiry),
-- or, for the first key that is no longer ours, REPLY_OTHERS when it holds
-- another owner's value and REPLY_NOT_OURS when it is gone (as pttl.lua;
-- reply codes: the table in scripts.go).
local least = -1
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if v ~= ARGV[1] then
    if v then return REPLY_OTHERS end
    return REPLY_NOT_OURS
  end
  local p = redis.call('PTTL', KEYS[i])
  if p >= 0 and (least < 0 or p < least) then least = p end
end
return least
