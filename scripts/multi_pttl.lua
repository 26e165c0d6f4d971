-- multi_pttl.lua: the remaining lease of a multi-name lock: the shortest of
-- its names' leases, while every one is still ours.
--
-- KEYS     the lock keys of the names
-- ARGV[1]  owner value
--
-- Returns the shortest PTTL in milliseconds (-1 if no key has an expiry),
-- or REPLY_NOT_OURS when some key is gone or another owner's (as pttl.lua;
-- reply codes: the table in scripts.go).
local least = -1
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) ~= ARGV[1] then return REPLY_NOT_OURS end
  local p = redis.call('PTTL', KEYS[i])
  if p >= 0 and (least < 0 or p < least) then least = p end
end
return least
