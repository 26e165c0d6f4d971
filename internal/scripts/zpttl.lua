-- zpttl.lua: the remaining lease of a read hold or a permit that is still
-- ours.
--
-- KEYS[1]  the sorted set of holds (rlock.lua, sem_acquire.lua)
-- ARGV[1]  owner value
--
-- Returns the remaining lease in milliseconds, or REPLY_NOT_OURS when the
-- hold is gone or its lease ended (as pttl.lua; reply codes: the table in
-- scripts.go).
local now = nowms()
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) <= now then return REPLY_NOT_OURS end
return tonumber(s) - now
