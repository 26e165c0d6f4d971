-- fence_del.lua: DEL a key only if the fencing token is not stale.
--
-- KEYS[1]  mark key: the highest token admitted for KEYS[2], stored as a
--          decimal string; it never expires and is kept by this script, so a
--          stale holder cannot re-create the deleted key
-- KEYS[2]  data key
-- ARGV[1]  token, a decimal string, 1 <= token <= 2^53
--
-- Returns {REPLY_OK} when token >= mark: the mark is raised to token and
-- KEYS[2] deleted (whether or not it existed). Returns {REPLY_STALE, mark}
-- when token < mark, changing nothing; mark is the stored decimal string.
-- Errors when the mark key holds something other than an integer. Reply
-- codes: the table in scripts.go.
--
-- Hash slots: both keys hash to one slot because the client names KEYS[1]
-- after KEYS[2]'s hash tag, or after a tag of the same slot (see fenceMarkKey
-- in fencing.go), so the script runs on Redis Cluster without CROSSSLOT.
--
-- The token is checked against the mark by checktoken (_lib.lua), shared by
-- the four fence scripts.
local raise, refused = checktoken(KEYS[1], ARGV[1])
if refused then return refused end
redis.call('DEL', KEYS[2])
if raise then
  redis.call('SET', KEYS[1], ARGV[1])
end
return {REPLY_OK}
