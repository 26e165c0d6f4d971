-- multi_acquire.lua: take several names at once, all or nothing.
--
-- KEYS     for n names: their lock keys (1..n), fence counters (n+1..2n) and
--          read-hold sets (2n+1..3n), in one global order (sorted by name)
-- ARGV[1]  owner value shared by all the names (a fresh UUID per attempt)
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  "0" to skip the fencing token; otherwise mint one, keeping the
--          counters for this many ms (their retention), "1" for the default
-- ARGV[4]  time floor of the token in microseconds, or "" to use this
--          server's TIME
--
-- Returns {REPLY_OK, token} when every name is ours (also for a client-side
-- retry of this attempt); {REPLY_TAKEN, pttl, owner, i} when name i is held
-- (owner "" and the longest lease when read holds refuse it), in which case
-- nothing was set; {REPLY_EXHAUSTED, counter} or {REPLY_BAD_FENCE, 0} when
-- no token can be minted (_lib.lua). Reply codes: the table in scripts.go.
--
-- One token serves all the names: every counter is raised to it, so it is
-- larger than any token issued before for any of them, and a fence of any
-- of the names admits it.
--
-- On Redis Cluster (or a Ring) the keys of one call must share a slot: the
-- caller sends one call per name there, in the same global order.
local n = #KEYS / 3
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return {REPLY_OK, minted(ARGV[3], KEYS[n + 1])}
end
local now
for i = 1, n do
  local cur = redis.call('GET', KEYS[i])
  if cur then return {REPLY_TAKEN, redis.call('PTTL', KEYS[i]), cur, i} end
  local readers = KEYS[2 * n + i]
  if redis.call('EXISTS', readers) == 1 then
    now = now or nowms()
    redis.call('ZREMRANGEBYSCORE', readers, '-inf', now)
    local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')
    if last[1] then return {REPLY_TAKEN, tonumber(last[2]) - now, '', i} end
  end
end
local fences = {}
for i = 1, n do fences[i] = KEYS[n + i] end
local tok, refused = mint(ARGV[3], fences, ARGV[4], ARGV[2])
if not tok then return refused end
for i = 1, n do redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2]) end
return {REPLY_OK, tok}
