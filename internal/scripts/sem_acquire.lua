-- sem_acquire.lua: take one permit of a counting semaphore.
--
-- KEYS[1]  permits held    "{<prefix><name>}:sem": a sorted set of owner
--                          values scored by the end of their lease (server
--                          time in ms), the key expiring with the longest
-- KEYS[2]  fence counter   "{<prefix><name>}:sem:fence"
-- KEYS[3]  permit count    "{<prefix><name>}:sem:permits": the number of
--                          permits the live holders took theirs under,
--                          living as long as the set
-- ARGV[1]  owner value of this permit (a fresh UUID per attempt)
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  "0" to skip the fencing token; otherwise mint one, keeping the
--          counter for this many ms (its retention), "1" for the default
-- ARGV[4]  number of permits
--
-- Returns {REPLY_OK, token} when the permit is ours (also for a client-side
-- retry of this attempt), {REPLY_TAKEN, ms, owner} when all permits are
-- held (ms: until the first of their leases ends; owner: its holder), or
-- {REPLY_EXHAUSTED, counter} / {REPLY_BAD_FENCE, 0} when no token can be
-- minted (see _lib.lua), or {REPLY_PERMITS, count} when the live holders
-- took their permits under another count: two processes that disagree on
-- the count would each enforce their own bound. Reply codes: the table in
-- scripts.go. A permit
-- whose lease ended no longer counts, whether or not its holder released
-- it: a crash cannot leak one.
local count = redis.call('GET', KEYS[3])
if count and count ~= ARGV[4] then return {REPLY_PERMITS, tonumber(count) or 0} end
local now = nowms()
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1])
if mine and tonumber(mine) > now then
  return {REPLY_OK, minted(ARGV[3], KEYS[2])}
end
local n = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  n = redis.call('ZCARD', KEYS[1])
end
if n >= tonumber(ARGV[4]) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {REPLY_TAKEN, tonumber(first[2]) - now, first[1]}
end
local tok, refused = mint(ARGV[3], KEYS[2], '', ARGV[2])
if not tok then return refused end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
redis.call('SET', KEYS[3], ARGV[4], 'PX', redis.call('PTTL', KEYS[1]))
return {REPLY_OK, tok}
