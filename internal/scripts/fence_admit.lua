-- fence_admit.lua: register a fencing token at the start of a critical section.
--
-- KEYS[1]  mark key: the highest token admitted for one guarded key, stored as a
--          decimal string; it never expires
-- ARGV[1]  token, a decimal string, 1 <= token <= 2^53
--
-- Returns {REPLY_OK} when token >= mark: the mark is raised to token (an
-- equal token is admitted and leaves the mark as it is). Returns
-- {REPLY_STALE, mark} when token < mark, changing nothing; mark is the
-- stored decimal string. Errors when the mark key holds something other
-- than an integer. Reply codes: the table in scripts.go.
--
-- Hash slots: one key only. The client names the mark key so that it hashes
-- to the slot of the data key it guards (see fenceMarkKey in fencing.go).
--
-- The token is checked against the mark by checktoken (_lib.lua), shared by
-- the four fence scripts.
local raise, refused = checktoken(KEYS[1], ARGV[1])
if refused then return refused end
if raise then redis.call('SET', KEYS[1], ARGV[1]) end
return {REPLY_OK}
