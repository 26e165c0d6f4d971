-- unwait.lua: withdraw a writer that stopped waiting (its Lock call gave up)
-- from the waiting writers, so that new readers need not wait for its entry
-- to lapse.
--
-- KEYS[1]  waiting writers "{<prefix><name>}:writers" (acquire.lua)
-- KEYS[2]  lock key
-- ARGV[1]  the writer's waiter id
-- ARGV[2]  release channel of the name
--
-- When it was the last waiting writer and no writer holds the name, it
-- publishes ARGV[1] on ARGV[2], waking the readers that waited for it.
-- Returns 1 when the entry was removed, 0 when it was gone.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('EXISTS', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.pcall('PUBLISH', ARGV[2], ARGV[1])
end
return 1
