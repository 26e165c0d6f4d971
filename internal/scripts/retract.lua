-- retract.lua: withdraw the grant of an attempt that did not get the lock
-- (too few masters granted it, its caller left, its validity ran out), if
-- the key is still ours.
--
-- KEYS[1]  lock key
-- ARGV[1]  owner value of the attempt
--
-- Unlike release.lua it passes the name to no queued writer and writes no
-- released marker: the attempt held no lock, so nobody's turn came. A
-- failed Redlock attempt that passed the name on one master woke the next
-- waiter, whose attempt failed the same way against the holder of the
-- other masters and passed it on again, for as long as that holder held
-- it. It publishes the owner value, a plain release message: a waiter
-- whose last attempt found this owner in its way (two contenders that
-- split the masters between them) tries again; one that found another
-- owner holding a quorum ignores it (waiters.dispatch).
--
-- Returns REPLY_OK when our key was deleted and the message published,
-- REPLY_UNPUBLISHED when deleted but the server refused the PUBLISH,
-- REPLY_NOT_OURS when the key is gone or another owner's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  local res = publishto(KEYS[1] .. SUFFIX_CHANNEL, ARGV[1])
  if type(res) == 'table' and res.err then return REPLY_UNPUBLISHED end
  return REPLY_OK
end
return REPLY_NOT_OURS
