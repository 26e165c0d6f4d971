-- extend.lua: move the lease of a lock that is still ours.
--
-- KEYS[1]  lock key
-- ARGV[1]  owner value
-- ARGV[2]  new TTL in milliseconds
-- ARGV[3]  guard in milliseconds: a lease with less than this left is not
--          moved (Lock.guardMillis: its holder has declared it lost by now;
--          a renewal that a paused server runs late must not revive it);
--          absent: no guard
-- ARGV[4]  present: read the key again after moving its lease. On a
--          connection with CLIENT TRACKING (default mode, track.go) the move
--          drops the key from the server's tracking table, even under
--          NOLOOP; the read puts it back, so that the next outside change
--          is still told.
--
-- Returns REPLY_OK when the lease was moved, REPLY_GONE when the key is
-- gone, REPLY_TAKEN when it belongs to another owner (so a loss can say
-- which), REPLY_LATE when it is ours but too near its end (ARGV[3]). Reply
-- codes: the table in scripts.go. It never creates a key: an expired lock
-- stays expired.
--
-- The lock key is its only key, on purpose. During a slot migration the
-- keys of a name move one by one (MIGRATE), and Redis answers TRYAGAIN to a
-- script whose declared keys are split between the two nodes for as long
-- as the split lasts: a renewal that also declared the metadata key or the
-- fence counter could then not run at all, and the lock would be lost
-- while its key is live. With one key it runs where that key is (go-redis
-- follows ASK and MOVED). The keys that live as long as the lease
-- (metadata, a long-held lock's fence counter) are kept apart by keep.lua,
-- sent alongside (kinds.go's companions).
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  if ARGV[3] and redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then return REPLY_LATE end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[4] then redis.call('PTTL', KEYS[1]) end
  return REPLY_OK
end
if cur then return REPLY_TAKEN end
return REPLY_GONE
