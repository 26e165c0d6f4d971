-- inspect.lua: who holds a lock, for how long, and its last fencing token,
-- read in one round trip. Read-only: it writes no key and publishes nothing.
--
-- KEYS[1]  lock key        "{<prefix><name>}"
-- KEYS[2]  fence counter   "{<prefix><name>}:fence"
-- KEYS[3]  metadata        "{<prefix><name>}:meta"  (written by the holder, if any)
-- KEYS[4]  read holds      "{<prefix><name>}:readers" (rlock.lua)
--
-- Returns {owner, pttl, counter, metadata, readers, rpttl}: the lock key's
-- owner value, or "" when no writer holds the name; its PTTL in
-- milliseconds (-2 when free, -1 when the key has no expiry); the fence
-- counter as stored, or "" when no token was minted yet; the metadata, or
-- "" when there is none (the stored value is "<owner>\n<metadata>": one left
-- by an earlier holder is not reported); the number of read holds whose
-- lease has not ended, and the longest of their leases in ms (0 without
-- any): values, never a reply code (scripts.go). A key of another type
-- fails the script with the server's WRONGTYPE error.
--
-- Hash slots: all keys carry the same hash tag, so on Redis Cluster they map
-- to one slot and the script never fails with CROSSSLOT.
local owner = redis.call('GET', KEYS[1]) or ''
if owner == VALUE_READ_MARK then owner = '' end -- read holds (rlock.lua), counted below
local pttl = -2
if owner ~= '' then pttl = redis.call('PTTL', KEYS[1]) end
local meta = ''
if owner ~= '' then
  local m = redis.call('GET', KEYS[3])
  local p = owner .. '\n'
  if m and string.sub(m, 1, #p) == p then meta = string.sub(m, #p + 1) end
end
local readers, rpttl = 0, 0
if redis.call('EXISTS', KEYS[4]) == 1 then
  local now = nowms()
  readers = redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf')
  if readers > 0 then
    local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
    rpttl = tonumber(last[2]) - now
  end
end
return {owner, pttl, redis.call('GET', KEYS[2]) or '', meta, readers, rpttl}
