-- multi_acquire.lua: take several names at once, all or nothing.
--
-- KEYS     for n names: their lock keys (1..n), fence counters (n+1..2n) and
--          waiting marks (2n+1..3n, _lib.lua: set for the name that refuses),
--          in one global order (sorted by name)
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
for i = 1, n do
  local cur = redis.call('GET', KEYS[i])
  if cur then
    -- Read holds keep readMark in the lock key (rlock.lua).
    local pttl = redis.call('PTTL', KEYS[i])
    waiting(KEYS[2 * n + i], pttl)
    if cur == VALUE_READ_MARK then cur = '' end
    return {REPLY_TAKEN, pttl, cur, i}
  end
end
local fences = {}
for i = 1, n do fences[i] = KEYS[n + i] end
local tok, refused = mint(ARGV[3], fences, ARGV[4], ARGV[2])
if not tok then return refused end
for i = 1, n do redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2]) end
return {REPLY_OK, tok}
