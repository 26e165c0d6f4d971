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
-- Returns 1 when the lease was moved, 0 when the key is gone, 2 when it
-- belongs to another owner (so a loss can say which), 3 when it is ours but
-- too near its end (ARGV[3]). It never creates a key: an expired lock stays
-- expired.
--
-- The fence counter "<KEYS[1]>:fence" (same hash tag) is kept at least as
-- long as the new lease (keepcounter, _lib.lua): a lock held for longer
-- than the counter's retention still has its token on the server.
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  if ARGV[3] and redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then return 3 end
  if KEYS[2] then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
  local moved = redis.call('PEXPIRE', KEYS[1], ARGV[2])
  keepcounter(KEYS[1] .. ':fence', ARGV[2])
  return moved
end
if cur then return 2 end
return 0
