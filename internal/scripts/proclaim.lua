-- proclaim.lua: announce the leader of an election (election.go): rewrite
-- the value its lock carries as metadata, only while the lock is still
-- ours, and publish the announcement on the election's channel.
--
-- KEYS[1]  lock key        "{<prefix><name>}"
-- KEYS[2]  metadata        "{<prefix><name>}:meta"  ("<owner>\n<value>")
-- ARGV[1]  owner value
-- ARGV[2]  '1': write ARGV[3] as the metadata; '0': leave the metadata
--          alone (a lock taken without metadata has no key that its
--          renewals keep alive, so none is created for it)
-- ARGV[3]  the value
-- ARGV[4]  election channel "{<prefix><name>}:elect"
-- ARGV[5]  the announcement: "<term>.<n>\n<value>", n numbering the
--          leader's announcements (Election.announce)
--
-- Returns REPLY_OK when the lock is ours and the announcement published;
-- REPLY_UNPUBLISHED when the value was written but the server refused the
-- PUBLISH (an ACL user without channel rights): observers learn it at
-- their next read; REPLY_NOT_OURS when the key is gone or another owner's:
-- nothing is written or published. Reply codes: the table in scripts.go.
--
-- The metadata key takes the lock key's remaining lease, so that it lives
-- and dies with the lock as extend.lua keeps them together.
--
-- Hash slots: both keys carry the same hash tag, so on Redis Cluster they
-- map to one slot and the script never fails with CROSSSLOT.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return REPLY_NOT_OURS end
if ARGV[2] == '1' then
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > 0 then
    redis.call('SET', KEYS[2], ARGV[1] .. '\n' .. ARGV[3], 'PX', pttl)
  else
    redis.call('SET', KEYS[2], ARGV[1] .. '\n' .. ARGV[3])
  end
end
local res = redis.pcall('PUBLISH', ARGV[4], ARGV[5])
if type(res) == 'table' and res.err then return REPLY_UNPUBLISHED end
return REPLY_OK
