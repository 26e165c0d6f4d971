-- fence_hset.lua: HSET one field of a hash only if the fencing token is not stale.
--
-- KEYS[1]  mark key: the highest token admitted for KEYS[2], stored as a
--          decimal string; it never expires
-- KEYS[2]  data key (a hash)
-- ARGV[1]  token, a decimal string, 1 <= token <= 2^53
-- ARGV[2]  field
-- ARGV[3]  value
--
-- Returns {REPLY_OK} when token >= mark: the mark is raised to token and
-- the field written. Returns {REPLY_STALE, mark} when token < mark,
-- changing nothing; mark is the stored decimal string. Errors, changing
-- nothing, when the mark key holds something other than an integer or
-- (WRONGTYPE) when KEYS[2] is not a hash. Reply codes: the table in
-- scripts.go.
--
-- Hash slots: both keys hash to one slot because the client names KEYS[1]
-- after KEYS[2]'s hash tag, or after a tag of the same slot (see fenceMarkKey
-- in fencing.go), so the script runs on Redis Cluster without CROSSSLOT.
--
-- The token is checked against the mark by checktoken (_lib.lua), shared by
-- the four fence scripts.
local raise, refused = checktoken(KEYS[1], ARGV[1])
if refused then return refused end
-- Write the data before raising the mark: if the write errors (WRONGTYPE),
-- the script stops with nothing changed.
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
if raise then
  redis.call('SET', KEYS[1], ARGV[1])
end
return {REPLY_OK}
