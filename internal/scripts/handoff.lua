-- handoff.lua: release a lock and grant it to the next owner in one step,
-- for a waiter of the same process (FIFO within a Locker, one round trip).
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter
-- KEYS[3]  released marker "<lock key>:released", read only (see below)
-- KEYS[4]  the queue of waiting writers "<lock key>:queue" (_lib.lua)
-- KEYS[5]  metadata key, when the next owner has metadata (ARGV[6])
-- ARGV[1]  current owner value
-- ARGV[2]  next owner value
-- ARGV[3]  next owner's TTL in milliseconds, or "0": the next owner takes
--          over the lease in force (the key keeps its expiry), for a
--          waiter that renews a lease of the same TTL (handoff.go)
-- ARGV[4]  "0" to skip the fencing token; otherwise the next owner's token
--          is minted as acquire.lua's ARGV[3] says (fencearg in _lib.lua):
--          "<retention>:<floor>", the floor alone for the default
--          retention, or a retention without a floor ("1": the default),
--          which takes this server's TIME as the floor
-- ARGV[5]  the next owner's id in the queue of waiting writers (_lib.lua),
--          "" if it has none
-- ARGV[6]  next owner's metadata value "<owner>\n<metadata>", if any
--
-- Returns {REPLY_OK, token} when the lock passed to the next owner (also
-- when this very hand-off already ran: a client-side retry after a lost
-- reply); {REPLY_WRITER_FIRST, 0} when a writer of another process is first
-- in the queue of waiting writers (nothing changed: the release must go to
-- it, fair across processes); {REPLY_ALREADY, 0} when the current owner had
-- already released it; {REPLY_NOT_OURS, 0} when the key is gone or another
-- owner's (left as it was: its value and expiry); {REPLY_EXHAUSTED, counter}
-- or {REPLY_BAD_FENCE, 0} when no token can be minted (see _lib.lua):
-- nothing was changed; {REPLY_OOM, 0} when the server refused the first
-- write (at maxmemory), before the script could tell whether the name was
-- ours: nothing was changed. "Nothing" but the entries of waiters
-- whose entries had lapsed, which reading the queue's head drops (firstwaiter
-- in _lib.lua), as any release does. Reply codes: the table in scripts.go.
--
-- Nothing is published: the name stays held, so no other waiter needs to
-- wake. No read hold can exist while the current owner holds the name. All
-- keys share one hash tag.
--
-- A hand-off writes no released marker (release.lua's), and reads one only
-- to tell REPLY_ALREADY from REPLY_NOT_OURS. The marker is for a release
-- sent again after its reply was lost, and a hand-off sent again finds the
-- key holding the next owner's value, which answers REPLY_OK above it: the
-- next owner cannot have released the name before this reply reached its
-- process, since the reply is what hands it the lock. A release of the
-- current owner that follows a hand-off whose outcome is unknown (see
-- handoff.go) reads "not ours" then, and the one more release sent after
-- such an answer (releaseNode in release.go) reads the same.
local on, floor = fencearg(ARGV[4])
-- The first write, which also reads the owner: the name goes to the next
-- owner, keeping the current lease for now. At maxmemory (noeviction)
-- Redis refuses a script's first write that may grow memory and lets every
-- later one through (see scripts.go). Refused here, nothing has changed and
-- nothing is granted, as acquire.lua grants nothing on a full server; the
-- caller then releases with release.lua, which frees the name there. XX
-- writes nothing where the key is gone; where the name is not ours to hand
-- on, or not now, the same SET with the value it answered puts the key
-- back as it was (KEEPTTL: its expiry never moved).
local res = redis.pcall('SET', KEYS[1], ARGV[2], 'XX', 'KEEPTTL', 'GET')
if type(res) == 'table' and res.err then return {REPLY_OOM, 0} end
local cur = res or nil
if cur == ARGV[2] then
  return {REPLY_OK, minted(on, KEYS[2])}
end
if cur ~= ARGV[1] then
  if cur then redis.call('SET', KEYS[1], cur, 'XX', 'KEEPTTL') end
  if redis.call('GET', KEYS[3]) == ARGV[1] then return {REPLY_ALREADY, 0} end
  return {REPLY_NOT_OURS, 0}
end
local first = firstwaiter(KEYS[4])
local tok, refused
if first and first ~= ARGV[5] then
  refused = {REPLY_WRITER_FIRST, 0}
else
  -- Minted before the waiter leaves the queue: a refusal changes nothing.
  tok, refused = mint(on, KEYS[2], floor, ARGV[3])
end
if not tok then
  redis.call('SET', KEYS[1], cur, 'XX', 'KEEPTTL')
  return refused
end
if first then dequeue(KEYS[4], first) end
local lease = ARGV[3]
if lease == '0' then
  if ARGV[6] then lease = math.max(redis.call('PTTL', KEYS[1]), 1) end
else
  redis.call('PEXPIRE', KEYS[1], lease)
end
if ARGV[6] then redis.call('SET', KEYS[5], ARGV[6], 'PX', lease) end
return {REPLY_OK, tok}
