-- multi_extend.lua: move the lease of every name of a multi-name lock, if
-- every one is still ours.
--
-- KEYS     the lock keys of the names
-- ARGV[1]  owner value
-- ARGV[2]  new TTL in milliseconds
-- ARGV[3]  guard in milliseconds: a lease with less than this left is not
--          moved (Lock.guardMillis: its holder has declared it lost by now;
--          a renewal that a paused server runs late must not revive it);
--          absent: no guard
-- ARGV[4]  present: read the keys again after moving their leases (see
--          extend.lua)
--
-- Returns REPLY_OK when every lease was moved, REPLY_GONE when some key is
-- gone, REPLY_TAKEN when some key belongs to another owner, REPLY_LATE when
-- some lease is too near its end (ARGV[3]); then nothing was moved (reply
-- codes: the table in scripts.go). Only the lock keys: each name's fence
-- counter is kept apart, by keep.lua (see extend.lua).
local late = false
for i = 1, #KEYS do
  local cur = redis.call('GET', KEYS[i])
  if cur ~= ARGV[1] then
    if cur then return REPLY_TAKEN end
    return REPLY_GONE
  end
  if ARGV[3] and redis.call('PTTL', KEYS[i]) < tonumber(ARGV[3]) then late = true end
end
if late then return REPLY_LATE end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
  if ARGV[4] then redis.call('PTTL', KEYS[i]) end
end
return REPLY_OK
