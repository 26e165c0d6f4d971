-- extend.lua: move the lease of a lock that is still ours.
--
-- KEYS[1]  lock key
-- KEYS[2]  the lock's metadata key, when it has metadata (moved with it)
-- ARGV[1]  owner value
-- ARGV[2]  new TTL in milliseconds
-- ARGV[3]  guard in milliseconds: a lease with less than this left is not
--          moved (Lock.guardMillis: its holder has declared it lost by now;
--          a renewal that a paused server runs late must not revive it);
--          absent: no guard
--
-- Returns REPLY_OK when the lease was moved, REPLY_GONE when the key is
-- gone, REPLY_TAKEN when it belongs to another owner (so a loss can say
-- which), REPLY_LATE when it is ours but too near its end (ARGV[3]). Reply
-- codes: the table in scripts.go. It never creates a key: an expired lock
-- stays expired.
--
-- The fence counter "<KEYS[1]>:fence" (same hash tag; kinds.go's
-- fenceSuffix) is kept at least as long as the new lease (keepcounter,
-- _lib.lua): a lock held for longer than the counter's retention still has
-- its token on the server.
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  if ARGV[3] and redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then return REPLY_LATE end
  if KEYS[2] then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  keepcounter(KEYS[1] .. SUFFIX_FENCE, ARGV[2])
  return REPLY_OK
end
if cur then return REPLY_TAKEN end
return REPLY_GONE
