-- repair.lua: put a held Redlock lock back on a master where its key is
-- gone (restarted empty, or never granted there: a bare quorum), if the
-- name is free on that master. Sent only after a renewal round in which a
-- quorum of masters extended the lock (repair.go).
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter
-- KEYS[3]  metadata (only with ARGV[5])
-- ARGV[1]  owner value
-- ARGV[2]  lease in milliseconds: what is left of the lease the quorum
--          has just renewed, never more
-- ARGV[3]  the lock's fencing token, "0" without fencing
-- ARGV[4]  how long the counter must live at least, in ms (raise.lua)
-- ARGV[5]  metadata value "<owner>\n<metadata>"; absent without metadata
--
-- Returns REPLY_OK when the key was set, REPLY_TAKEN when the name is not
-- free there (another owner's key, a reservation, or ours already): SET NX
-- never touches a key that exists. A counter below the token is raised to
-- it (never lowered), so that a majority holds a counter at least the
-- lock's token again once a master that kept one restarted empty; the
-- metadata is written only where none is.
--
-- The SET NX comes first: a full server (maxmemory) refuses it before
-- anything is written.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return REPLY_TAKEN end
if ARGV[3] ~= '0' then
  local want = tonumber(ARGV[3])
  local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
  if counter(cur) and cur < want then
    redis.call('SET', KEYS[2], ARGV[3], 'PX', math.max(tonumber(ARGV[4]), redis.call('PTTL', KEYS[2])))
  end
end
if ARGV[5] then redis.call('SET', KEYS[3], ARGV[5], 'NX', 'PX', ARGV[2]) end
return REPLY_OK
