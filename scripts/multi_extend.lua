-- multi_extend.lua: move the lease of every name of a multi-name lock, if
-- every one is still ours.
--
-- KEYS     the lock keys of the names
-- ARGV[1]  owner value
-- ARGV[2]  new TTL in milliseconds
--
-- Returns 1 when every lease was moved, 0 when some key is gone, 2 when
-- some key belongs to another owner; then nothing was moved. Each name's
-- fence counter "<lock key>:fence" is kept at least as long as the new
-- lease (keepcounter, _lib.lua).
for i = 1, #KEYS do
  local cur = redis.call('GET', KEYS[i])
  if cur ~= ARGV[1] then
    if cur then return 2 end
    return 0
  end
end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
  keepcounter(KEYS[i] .. ':fence', ARGV[2])
end
return 1
