-- acquire.lua: take the lock if free and mint its fencing token, in one round trip.
--
-- KEYS[1]  lock key        "{<prefix><name>}"
-- KEYS[2]  fence counter   "{<prefix><name>}:fence"  (never expires)
-- KEYS[3]  metadata        "{<prefix><name>}:meta"   (only with ARGV[5])
-- ARGV[1]  owner value (a fresh UUID per attempt)
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  "1" to mint a fencing token, "0" to skip it
-- ARGV[4]  time floor of the token in microseconds, or "" to use this
--          server's TIME (Redlock proposes one floor to all masters so that
--          they mint the same token and need no write-back round)
-- ARGV[5]  metadata value "<owner>\n<metadata>" (WithMetadata), stored at
--          KEYS[3] with the lock's TTL; absent without metadata
--
-- Returns {1, token} when the lock is ours (token 0 with fencing off),
-- {0, pttl, owner} when another owner holds it (pttl: its remaining lease in
-- ms, -1 for a key without expiry; owner: the value it holds),
-- {-1, counter} when the counter reached 2^53-1, where a Lua double can no
-- longer count up by one (the lock is not taken: a repeated token would let
-- a fence admit two owners), or {-2, 0} when the fence key holds something
-- that is not a number.
--
-- Hash slots: both keys carry the same hash tag, so on Redis Cluster they map
-- to one slot and the script never fails with CROSSSLOT.
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  -- Our own earlier execution of this very attempt (a client-side retry after
  -- a lost reply): report the grant it made instead of a false "taken".
  local tok = 0
  if ARGV[3] == '1' then tok = tonumber(redis.call('GET', KEYS[2]) or '0') or 0 end
  return {1, tok}
end
if cur then
  return {0, redis.call('PTTL', KEYS[1]), cur}
end
local tok = 0
if ARGV[3] == '1' then
  -- token = max(counter + 1, time in microseconds). The counter alone
  -- goes backwards when Redis loses it together with the lock (restart without
  -- persistence, failover to a replica that missed the write); the time floor
  -- keeps the next token above every earlier one as long as the clock that
  -- gives the floor is not behind by more than the time since the last grant.
  local last = tonumber(redis.call('GET', KEYS[2]) or '0')
  -- tonumber also accepts 'nan', 'inf' and '1e400': none is a counter.
  if not last or last ~= last or last == math.huge or last == -math.huge then return {-2, 0} end
  if last >= 9007199254740991 then return {-1, last} end
  local now = tonumber(ARGV[4])
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  tok = last + 1
  if now > tok then tok = now end
  -- %.0f: tostring() would print 1.8e+15 and lose digits of a µs timestamp.
  redis.call('SET', KEYS[2], string.format('%.0f', tok))
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[5] then redis.call('SET', KEYS[3], ARGV[5], 'PX', ARGV[2]) end
return {1, tok}
