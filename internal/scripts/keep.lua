-- keep.lua: keep a key that lives as long as a lock's lease alive for at
-- least a renewed lease: the lock's metadata, a permit's count key, or the
-- fence counter of a lock held longer than the counter's retention (so
-- that Inspect still finds its token). Sent apart from the renewal itself
-- (extend.lua, zextend.lua, multi_extend.lua), whose outcome it never
-- changes: see extend.lua for why a renewal touches its lock key only.
--
-- KEYS[1]  the key to keep
-- ARGV[1]  the renewed lease in milliseconds
-- ARGV[2]  an owner value: keep the key only while its value starts with
--          "<owner>\n" (metadata, written by that owner); absent: any value
--
-- Returns 1 when the key's expiry was moved, 0 otherwise (a value, not a
-- reply code). It never creates a key, never shortens an expiry, and
-- leaves a key without expiry (a counter written before counters expired)
-- as it is.
local p = redis.call('PTTL', KEYS[1])
if p < 0 or p >= tonumber(ARGV[1]) then return 0 end
if ARGV[2] then
  local v = redis.call('GET', KEYS[1])
  local want = ARGV[2] .. '\n'
  if string.sub(v, 1, #want) ~= want then return 0 end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
