-- raise.lua: raise a fence counter to at least a given token (never lowers it).
--
-- KEYS[1]  fence counter "{<prefix><name>}:fence"
-- ARGV[1]  token (decimal)
-- ARGV[2]  the counter's retention in ms (WithFenceRetention); absent for
--          the default (see retention, _lib.lua)
--
-- Returns the counter after the call (a value, never a reply code). Redlock
-- writes the token it hands out back to every reachable node, so any later
-- quorum mints a larger one. A raised counter expires as a minted one does,
-- never sooner than it would have.
local want = tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur >= want then return cur end
redis.call('SET', KEYS[1], ARGV[1], 'PX', math.max(retention(ARGV[2]), redis.call('PTTL', KEYS[1])))
return want
