-- multi_extend.lua: move the lease of every name of a multi-name lock, if
-- every one is still ours.
--
-- KEYS     the lock keys of the names
-- ARGV[1]  owner value
-- ARGV[2]  new TTL in milliseconds
-- ARGV[3]  guard in milliseconds: a lease with less than this left is not
--          moved (Lock.guardMillis: its holder has declared it lost by now;
--          a renewal that a paused server runs late must not revive it);
--          absent: 0. A key without expiry is never moved.
--
-- Returns REPLY_OK when every lease was moved, REPLY_GONE when some key is
-- gone, REPLY_TAKEN when some key belongs to another owner (the first such
-- key in KEYS decides), REPLY_LATE when some lease is too near its end
-- (ARGV[3]); then every lease is where it was, but for the time the script
-- ran (reply codes: the table in scripts.go). Only the lock keys: each
-- name's fence counter is kept apart, by keep.lua (see extend.lua).
--
-- As extend.lua, it reads each owner after moving its lease, so that a
-- tracking connection keeps the key tracked with no read more: PTTL of
-- every key, then PEXPIRE and GET key by key. When a key turns out not to
-- be ours, the keys moved so far go back to the expiry their PTTL read
-- (later by the time the script ran; see extend.lua), and ours are read
-- again so that they stay tracked. A move the server refuses, a key that
-- is gone, late or without expiry, or a lease of 2^53 ms or more, is
-- decided by reading the owners first, and only then moving (a TTL
-- argument below 1, which would delete the keys, never). ARGV[4] is not
-- needed and not sent (pipelined.call).
local ttl = tonumber(ARGV[2])
local guard = tonumber(ARGV[3]) or 0
local left = {}
local valid = ttl and ttl >= 1
local movable = valid
for i = 1, #KEYS do
  left[i] = redis.call('PTTL', KEYS[i])
  if not (left[i] > 0 and left[i] >= guard and left[i] < 9007199254740992) then movable = false end
end
local function back(n, ours)
  for j = 1, n do
    redis.call('PEXPIRE', KEYS[j], left[j])
    if j <= ours then redis.call('PTTL', KEYS[j]) end
  end
end
if movable then
  for i = 1, #KEYS do
    local moved = redis.pcall('PEXPIRE', KEYS[i], ARGV[2])
    if type(moved) == 'table' then
      back(i - 1, i - 1)
      break
    end
    local cur = redis.pcall('GET', KEYS[i])
    if cur ~= ARGV[1] then
      back(i, i - 1)
      if type(cur) == 'table' then return cur end
      return REPLY_TAKEN
    end
    if i == #KEYS then return REPLY_OK end
  end
end
local late = false
for i = 1, #KEYS do
  local cur = redis.call('GET', KEYS[i])
  if cur ~= ARGV[1] then
    if cur then return REPLY_TAKEN end
    return REPLY_GONE
  end
  if not (left[i] > 0 and left[i] >= guard) then late = true end
end
if late or not valid then return REPLY_LATE end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
  redis.call('PTTL', KEYS[i])
end
return REPLY_OK
