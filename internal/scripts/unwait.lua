-- unwait.lua: take a writer that stopped waiting (its Lock call gave up) out
-- of the queue of waiting writers (_lib.lua), so that neither new readers
-- nor the writers behind it wait for its entry to lapse.
--
-- KEYS[1]  the queue "{<prefix><name>}:queue"
-- KEYS[2]  lock key
-- ARGV[1]  the writer's id
-- ARGV[2]  release channel of the name
-- ARGV[3]  how long a reservation for the next writer lasts, in ms (see
--          release.lua); absent: 1000
--
-- A name reserved for it ('queued:' .. id, kinds.go's reservedPrefix) passes
-- on to the next writer in the queue, or is freed. When no writer is left
-- waiting (no "o:" entry: the withdrawal marks stay) and the name is free or
-- read-held (readMark), it publishes
-- ARGV[1] on ARGV[2], waking the readers that waited for it. Returns REPLY_OK (reply codes: the table in
-- scripts.go).
dequeue(KEYS[1], ARGV[1])
-- The writer's mark of withdrawal: an attempt of its call still on its way
-- does not enter it again (enqueue). It lives as long as the queue, which
-- lives at least 5s more, longer than an attempt is on its way.
-- pcall: a full server (maxmemory) refuses the ZADD, and the withdrawal
-- stands without the mark.
redis.pcall('ZADD', KEYS[1], 0, 'a:' .. ARGV[1])
redis.pcall('PEXPIRE', KEYS[1], 5000)
local cur = redis.call('GET', KEYS[2])
if cur == PREFIX_RESERVED .. ARGV[1] then
  pass(KEYS[2], KEYS[1], ARGV[2], ARGV[1], tonumber(ARGV[3] or 1000))
elseif not redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(0', 'LIMIT', 0, 1)[1] and (not cur or cur == VALUE_READ_MARK) then
  publishto(ARGV[2], ARGV[1])
end
return REPLY_OK
