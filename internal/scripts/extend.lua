-- extend.lua: move the lease of a lock that is still ours.
--
-- KEYS[1]  lock key
-- ARGV[1]  owner value
-- ARGV[2]  new TTL in milliseconds
-- ARGV[3]  guard in milliseconds: a lease with less than this left is not
--          moved (Lock.guardMillis: its holder has declared it lost by now;
--          a renewal that a paused server runs late must not revive it);
--          absent: 0. A key without expiry is never moved.
--
-- Returns REPLY_OK when the lease was moved, REPLY_GONE when the key is
-- gone, REPLY_TAKEN when it belongs to another owner (so a loss can say
-- which), REPLY_LATE when it is ours but too near its end (ARGV[3]). Reply
-- codes: the table in scripts.go. It never creates a key: an expired lock
-- stays expired.
--
-- The owner is read after the move, not before: on a connection with
-- CLIENT TRACKING (default mode, track.go) the move drops the key from the
-- server's tracking table, even under NOLOOP, and a read after it puts the
-- key back, so that the next outside change is still told. Reading first
-- and again after cost one call more per renewal (1.1 us of the server's
-- time, BENCHMARKS.md "scale"). The price is on the rare path: a lease
-- that turns out to be another owner's is moved back to the expiry it had
-- (PTTL's whole milliseconds read in this script, so later than before by
-- the time the script ran, under a millisecond but for a stalled server;
-- earlier only if the server's clock stepped back meanwhile, which moves
-- every TTL of Redis 7.0). That owner's tracking hears it as a change of
-- its key (and re-reads it), a WATCH of it fails, and two expire events
-- are published. A key of another type is moved back before its error is
-- returned. A move the server refuses (a read-only replica, NOREPLICAS,
-- MISCONF) wrote nothing, and the owner is read as before the change: a
-- refusal is the reply for our key, REPLY_TAKEN or REPLY_GONE otherwise.
-- A lease of 2^53 ms or more (not one of ours: Lua could not give its
-- length back exactly) is read first, then moved. Callers (ttlMillis)
-- never send ARGV[2] below 1, which would delete the key; the script
-- checks anyway. ARGV[4], which the other extend scripts read as "read the
-- keys again", is not needed here and is not sent (pipelined.call).
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
local left = redis.call('PTTL', KEYS[1])
local ttl = tonumber(ARGV[2])
local movable = left > 0 and left >= (tonumber(ARGV[3]) or 0) and ttl and ttl >= 1
if movable and left < 9007199254740992 then
  local moved = redis.pcall('PEXPIRE', KEYS[1], ARGV[2])
  if type(moved) ~= 'table' then
    local cur = redis.pcall('GET', KEYS[1])
    if cur == ARGV[1] then return REPLY_OK end
    redis.call('PEXPIRE', KEYS[1], left)
    if type(cur) == 'table' then return cur end
    return REPLY_TAKEN
  end
  local cur = redis.call('GET', KEYS[1])
  if cur == ARGV[1] then return moved end
  if cur then return REPLY_TAKEN end
  return REPLY_GONE
end
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  if not movable then return REPLY_LATE end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PTTL', KEYS[1])
  return REPLY_OK
end
if cur then return REPLY_TAKEN end
return REPLY_GONE
