-- release.lua: give up the lock only if it is still ours, and tell waiters:
-- the first live waiting writer in the name's queue gets it reserved and is
-- woken alone; with nobody queued the key is deleted and every waiter woken
-- (pass, in _lib.lua).
--
-- KEYS[1]  lock key
-- KEYS[2]  released marker "<lock key>:released"
-- KEYS[3]  the queue of waiting writers "<lock key>:queue" (_lib.lua)
-- ARGV[1]  owner value
-- ARGV[2]  lifetime of the marker in milliseconds (the lock's TTL)
-- ARGV[3]  how long a reservation for a waiting writer lasts, in ms (the
--          releaser's node timeout: a waiter that no longer asks, whose
--          withdrawal was lost, holds the name no longer); absent: the
--          default node timeout for a lease of ARGV[2], a tenth of it
--          within [100, 1000] (defaultNodeTimeout in options.go)
--
-- The release channel is "<lock key>:rel" (kinds.go's channelSuffix).
--
-- Returns REPLY_OK when our lock was given up and the wake-up published on
-- the release channel (so waiters wake at once instead of polling); REPLY_UNPUBLISHED
-- when it was given up but the server refused the PUBLISH (a Redis 7 ACL
-- user without channel rights): the release stands, waiters wake by their
-- timers; REPLY_ALREADY when this owner had already released it: a
-- client-side retry of a release whose reply was lost must not read as "not
-- held"; REPLY_NOT_OURS when the key is gone or belongs to another owner
-- (which is then left untouched, and nothing is published). Reply codes:
-- the table in scripts.go.
--
-- The name is given up before the marker is written: at maxmemory
-- (noeviction) Redis refuses a script's first write that may grow memory
-- (SET) but lets every write after one that cannot (pass's LPOP and DEL)
-- through, so the release stands on a full server. The marker is written
-- with pcall all the same: were it refused, a retried release after a lost
-- reply would read "not held" instead of "already released", and the
-- release itself would still stand.
--
-- pass publishes with PUBLISH, or SPUBLISH on a Cluster (publishto in
-- _lib.lua). The keys and the channel share one hash tag, so SPUBLISH
-- stays on the keys' shard.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  local ttl = tonumber(ARGV[2])
  local res = pass(KEYS[1], KEYS[3], KEYS[1] .. SUFFIX_CHANNEL, ARGV[1], math.min(tonumber(ARGV[3]) or math.min(math.max(math.floor(ttl / 10), 100), 1000), ttl))
  redis.pcall('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
  if type(res) == 'table' and res.err then return REPLY_UNPUBLISHED end
  return REPLY_OK
end
if redis.call('GET', KEYS[2]) == ARGV[1] then return REPLY_ALREADY end
return REPLY_NOT_OURS
