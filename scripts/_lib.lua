-- _lib.lua: prepended to every script that calls mint or nowms (see
-- newScript); not a script by itself.
--
-- mint(fences, floor) raises every counter in fences to one new token,
-- larger than each of them (counter + 1) and no smaller than the time floor
-- in microseconds: floor, or this server's TIME when floor is not a number.
-- The counter alone goes backwards when Redis loses it together with the
-- lock (restart without persistence, failover to a replica that missed the
-- write); the time floor keeps the next token above every earlier one as
-- long as the clock that gives the floor is not behind by more than the time
-- since the last grant. It returns the token, or nil and the reply the
-- script must give instead: {-1, counter} when a counter reached 2^53-1,
-- where a Lua double can no longer count up by one, or {-2, 0} when a fence
-- key holds something that is not a number. Nothing is written then.
local function mint(fences, floor)
  local tok = 0
  for _, k in ipairs(fences) do
    local last = tonumber(redis.call('GET', k) or '0')
    -- tonumber also accepts 'nan', 'inf' and '1e400': none is a counter.
    if not last or last ~= last or last == math.huge or last == -math.huge then return nil, {-2, 0} end
    if last >= 9007199254740991 then return nil, {-1, last} end
    if last + 1 > tok then tok = last + 1 end
  end
  local now = tonumber(floor)
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  if now > tok then tok = now end
  -- %.0f: tostring() would print 1.8e+15 and lose digits of a µs timestamp.
  local s = string.format('%.0f', tok)
  for _, k in ipairs(fences) do redis.call('SET', k, s) end
  return tok
end

-- nowms is the server's time in milliseconds: the clock of the expiry
-- scores in read-hold and permit sets.
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
