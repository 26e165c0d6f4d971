-- zrelease.lua: end a read hold or a permit that is still ours, and tell
-- waiters.
--
-- KEYS[1]  the sorted set of holds (rlock.lua, sem_acquire.lua)
-- KEYS[2]  released marker of this owner "<set key>:released:<owner>"
-- KEYS[3]  a permit's count key "<set key>:permits" (sem_acquire.lua),
--          deleted with the last live permit; for a read hold the lock
--          key, whose readMark (rlock.lua) goes with the last live hold
-- ARGV[1]  owner value
-- ARGV[2]  release channel
-- ARGV[3]  lifetime of the marker in milliseconds (the hold's TTL)
-- ARGV[4]  "1" to publish only when no hold is left (a read hold: only a
--          writer waits for it), "0" to publish on every release (a permit)
--
-- Returns what release.lua returns: REPLY_OK released (and published when
-- due), REPLY_UNPUBLISHED released but the PUBLISH was refused,
-- REPLY_ALREADY already released by this owner (a retried call after a lost
-- reply), REPLY_NOT_OURS not held (gone, or its lease ended). Reply codes:
-- the table in scripts.go.
--
-- The hold is removed (ZREM) before the marker is written, so that the
-- release stands at maxmemory, and the marker is written with pcall (see
-- release.lua).
local now = nowms()
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s then
  redis.call('ZREM', KEYS[1], ARGV[1])
  if KEYS[3] and ARGV[4] == '1' then
    -- The lock key's readMark follows the live read holds: it goes with
    -- the last of them, else expires with the longest lease left.
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
    if redis.call('GET', KEYS[3]) == VALUE_READ_MARK then
      local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
      if last[2] then
        redis.call('PEXPIREAT', KEYS[3], last[2])
      else
        redis.call('DEL', KEYS[3])
      end
    end
  elseif KEYS[3] then
    -- The last live permit gone: the next holder may choose another count.
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
    if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('DEL', KEYS[3]) end
  end
  if tonumber(s) > now then
    redis.pcall('SET', KEYS[2], '1', 'PX', ARGV[3])
    local publish = ARGV[4] ~= '1'
    if not publish then
      redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
      publish = redis.call('EXISTS', KEYS[1]) == 0
    end
    if publish then
      local res = publishto(ARGV[2], ARGV[1])
      if type(res) == 'table' and res.err then return REPLY_UNPUBLISHED end
    end
    return REPLY_OK
  end
end
if redis.call('EXISTS', KEYS[2]) == 1 then return REPLY_ALREADY end
return REPLY_NOT_OURS
