-- inspect.lua: who holds a lock, for how long, and its last fencing token,
-- read in one round trip. Read-only: it writes no key and publishes nothing.
--
-- KEYS[1]  lock key        "{<prefix><name>}"
-- KEYS[2]  fence counter   "{<prefix><name>}:fence"
-- KEYS[3]  metadata        "{<prefix><name>}:meta"  (written by the holder, if any)
--
-- Returns {owner, pttl, counter, metadata}: the lock key's owner value, or ""
-- when the name is free; its PTTL in milliseconds (-2 when free, -1 when the
-- key has no expiry); the fence counter as stored, or "" when no token was
-- minted yet; the metadata, or "" when there is none (the stored value is
-- "<owner>\n<metadata>": one left by an earlier holder is not reported). A key of another type
-- fails the script with the server's WRONGTYPE error.
--
-- Hash slots: all three keys carry the same hash tag, so on Redis Cluster
-- they map to one slot and the script never fails with CROSSSLOT.
local owner = redis.call('GET', KEYS[1]) or ''
local pttl = -2
if owner ~= '' then pttl = redis.call('PTTL', KEYS[1]) end
local meta = ''
if owner ~= '' then
  local m = redis.call('GET', KEYS[3])
  local p = owner .. '\n'
  if m and string.sub(m, 1, #p) == p then meta = string.sub(m, #p + 1) end
end
return {owner, pttl, redis.call('GET', KEYS[2]) or '', meta}
