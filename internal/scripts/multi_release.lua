-- multi_release.lua: release the names of a multi-name lock that are still
-- ours, and tell each name's waiters: each name goes to its first queued
-- writer, if any, as release.lua does (pass, in _lib.lua).
--
-- KEYS     for n names: their lock keys (1..n), then their released markers
--          "<lock key>:released" (n+1..2n), then their queues of waiting
--          writers "<lock key>:queue" (2n+1..3n)
-- ARGV[1]  owner value
-- ARGV[2]  suffix of a name's release channel (":rel"), after its lock key
-- ARGV[3]  lifetime of the markers in milliseconds (the lock's TTL)
-- ARGV[4]  how long a reservation for a waiting writer lasts, in ms (see
--          release.lua); absent: 1000
--
-- Returns what release.lua returns, for all the names together: REPLY_OK
-- when every name was ours and is released, REPLY_UNPUBLISHED when so but a
-- PUBLISH was refused, REPLY_ALREADY when this owner had released every one
-- of them before (a retried call), REPLY_NOT_OURS when some name is gone or
-- another owner's (the names still ours are released all the same, and
-- others are left untouched). Reply codes: the table in scripts.go.
--
-- Each name is given up before its marker is written, so that the release
-- stands at maxmemory (see release.lua).
local n = #KEYS / 3
local ours, before, unpublished = 0, 0, false
for i = 1, n do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    local res = pass(KEYS[i], KEYS[2 * n + i], KEYS[i] .. ARGV[2], ARGV[1], math.min(tonumber(ARGV[4] or 1000), tonumber(ARGV[3])))
    redis.pcall('SET', KEYS[n + i], ARGV[1], 'PX', ARGV[3])
    if type(res) == 'table' and res.err then unpublished = true end
    ours = ours + 1
  elseif redis.call('GET', KEYS[n + i]) == ARGV[1] then
    before = before + 1
  end
end
if ours + before < n then return REPLY_NOT_OURS end
if ours == 0 then return REPLY_ALREADY end
if unpublished then return REPLY_UNPUBLISHED end
return REPLY_OK
