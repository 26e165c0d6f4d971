-- release.lua: give up the lock only if it is still ours, and tell waiters
-- if any wait: the first live waiting writer in the name's queue gets it
-- reserved and is woken alone; with nobody queued the key is deleted and
-- every waiter woken (pass, in _lib.lua).
--
-- KEYS[1]  lock key
-- KEYS[2]  released marker "<lock key>:released"
-- KEYS[3]  the queue of waiting writers "<lock key>:queue" (_lib.lua)
-- KEYS[4]  the waiting mark "<lock key>:waiting" (waiting in _lib.lua)
-- ARGV[1]  owner value
-- ARGV[2]  lifetime of the marker in milliseconds (the lock's TTL) when
--          waiters are told
-- ARGV[3]  how long a reservation for a waiting writer lasts, in ms (the
--          releaser's node timeout: a waiter that no longer asks, whose
--          withdrawal was lost, holds the name no longer); absent: the
--          default node timeout for a lease of ARGV[2], a tenth of it
--          within [100, 1000] (defaultNodeTimeout in options.go)
-- ARGV[4]  "1" to tell waiters even when none marked the name waited for
--          (an election's leader: its observers hear the resignation)
--
-- The release channel is "<lock key>:rel" (kinds.go's channelSuffix).
--
-- Returns REPLY_OK when our lock was given up (and waiters told); REPLY_UNPUBLISHED
-- when it was given up but the server refused the PUBLISH (a Redis 7 ACL
-- user without channel rights): the release stands, waiters wake by their
-- timers; REPLY_ALREADY when this owner had already released it: a
-- client-side retry of a release whose reply was lost must not read as "not
-- held"; REPLY_NOT_OURS when the key is gone or belongs to another owner
-- (which is then left untouched, and nothing is published). Reply codes:
-- the table in scripts.go.
--
-- Nobody waiting (no mark: every refused caller that waits sets it, see
-- acquire.lua, rlock.lua, multi_acquire.lua, except a waiter of the
-- holder's own process, which that process wakes), the release is two commands:
-- MGET reads the owner and the mark, and RENAME frees the name and leaves
-- the owner value at the marker, for what was left of the lease. Otherwise
-- pass tells the waiters (see _lib.lua): the first live waiting writer in
-- the name's queue gets it reserved and is woken alone; with nobody queued
-- the key is deleted and every waiter woken.
--
-- The name is given up before anything is written: at maxmemory
-- (noeviction) Redis refuses a script's first write that may grow memory
-- (SET) but lets every write after one that cannot (RENAME, or pass's ZREM
-- and DEL) through, so the release stands on a full server. The marker is
-- written with pcall all the same: were it refused, a retried release after
-- a lost reply would read "not held" instead of "already released", and
-- the release itself would still stand.
--
-- pass publishes with PUBLISH, or SPUBLISH on a Cluster (publishto in
-- _lib.lua). The keys and the channel share one hash tag, so SPUBLISH
-- stays on the keys' shard.
--
-- The common case returns before the marker line (--@lib): pass and the
-- queue's functions are defined only after it (internal/luasrc).
local v = redis.call('MGET', KEYS[1], KEYS[4])
local ours = v[1] == ARGV[1]
if ours and not v[2] and ARGV[4] ~= '1' then
  redis.call('RENAME', KEYS[1], KEYS[2])
  return REPLY_OK
end
--@lib
if ours then
  local ttl = tonumber(ARGV[2])
  local res = pass(KEYS[1], KEYS[3], KEYS[1] .. SUFFIX_CHANNEL, ARGV[1], math.min(tonumber(ARGV[3]) or math.min(math.max(math.floor(ttl / 10), 100), 1000), ttl))
  redis.pcall('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
  if type(res) == 'table' and res.err then return REPLY_UNPUBLISHED end
  return REPLY_OK
end
if redis.call('GET', KEYS[2]) == ARGV[1] then return REPLY_ALREADY end
return REPLY_NOT_OURS
