-- fence_admit.lua: register a fencing token at the start of a critical section.
--
-- KEYS[1]  mark key: the highest token admitted for one guarded key, stored as a
--          decimal string; it never expires
-- ARGV[1]  token, a decimal string, 1 <= token <= 2^53
--
-- Returns {1} when token >= mark: the mark is raised to token (an equal token
-- is admitted and leaves the mark as it is). Returns {0, mark} when
-- token < mark, changing nothing; mark is the stored decimal string.
-- Errors when the mark key holds something other than an integer.
--
-- Hash slots: one key only. The client names the mark key so that it hashes
-- to the slot of the data key it guards (see fenceMarkKey in fencing.go).
--
-- Tokens are compared as Lua numbers (doubles), exact for integers up to 2^53,
-- which the client enforces. The mark is stored as the caller's string, never
-- through tostring(), which prints 1800000000000001 as "1.8e+15".
local token = tonumber(ARGV[1])
if not token or token < 1 then
  return redis.error_reply('ERR redlock fence: invalid token ' .. tostring(ARGV[1]))
end
local mark = redis.call('GET', KEYS[1])
if mark then
  local highest = tonumber(mark)
  if not highest then
    return redis.error_reply('ERR redlock fence: mark key ' .. KEYS[1] .. ' does not hold an integer')
  end
  if token < highest then
    return {0, mark}
  end
  if token == highest then
    return {1}
  end
end
redis.call('SET', KEYS[1], ARGV[1])
return {1}
