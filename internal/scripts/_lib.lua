-- _lib.lua: prepended to every script that calls one of its functions (see
-- newScript); not a script by itself. Its replies are reply codes
-- (REPLY_EXHAUSTED...), whose values newScript writes in from the table in
-- scripts.go.
--
-- retention(arg) is how long a fence counter outlives its last write, in
-- ms: arg when it is a number above 1 (WithFenceRetention), else the
-- default, which newScript writes in from Go. A script's caller that does
-- not say passes '1' ("fencing on") or nothing. Its second result is the
-- same for a command's argument, the default as text: Redis before 7.2
-- prints a number given to redis.call with snprintf("%.17g"), a quarter of
-- what the PEXPIRE it is given to costs the server.
local function retention(arg)
  if arg == '1' then return DEFAULT_FENCE_RETENTION_MS, 'DEFAULT_FENCE_RETENTION_MS' end
  local ms = tonumber(arg)
  if ms and ms > 1 then return ms, ms end
  return DEFAULT_FENCE_RETENTION_MS, 'DEFAULT_FENCE_RETENTION_MS'
end

-- counter(v) says whether v, a fence key's value through tonumber, is a
-- counter: tonumber also accepts 'nan', 'inf' and '1e400'.
local function counter(v)
  return v and v == v and v ~= math.huge and v ~= -math.huge
end

-- mintone is mint for one counter k, with the time floor now and the life
-- life (ms, a number or its text: see retention): the floor is written and
-- the counter read in one call (SET GET), then the counter raised past the
-- floor in the rare case it was ahead of it, or put back as it was when it
-- held no counter. Its expiry only ever moves later (PEXPIRE GT), and one
-- without expiry gets one. The floor goes to SET as text, as the caller
-- sent it, when mint was given it (text: tonumber(text) is now, so every
-- reader of the counter reads the number the grant returns; the library
-- sends plain digits), since Redis before 7.2 prints a number given to
-- redis.call with "%.17g", 5 to 8% of an uncontended pair's server work
-- (callgrind, BENCHMARKS.md "Fourth round"). The floor the server's TIME
-- gives goes as a number all the same, which "%.17g" writes with every
-- digit of an integer below 2^53, for less than string.format('%.0f').
local function mintone(k, now, life, text)
  local old = redis.call('SET', k, text or now, 'KEEPTTL', 'GET')
  if not old then
    redis.call('PEXPIRE', k, life)
    return now
  end
  local last = tonumber(old)
  if not counter(last) or last >= 9007199254740991 then
    redis.call('SET', k, old, 'KEEPTTL')
    if not counter(last) then return nil, {REPLY_BAD_FENCE, 0} end
    return nil, {REPLY_EXHAUSTED, last}
  end
  local tok = now
  if last + 1 > tok then
    tok = last + 1
    redis.call('SET', k, string.format('%.0f', tok), 'KEEPTTL')
  end
  -- PEXPIRE GT also refuses an expiry no later than the one set: that of
  -- a grant in the same millisecond of the server's clock, whose token is
  -- then below the floor by no more than that grant's floor lagged behind
  -- its run (a loaded machine can hold a call after its floor was read,
  -- TestFenceLifeLaggingFloor; a second allows for that and for the clocks
  -- of two clients). Only otherwise can the refusal mean a key without
  -- expiry (written before counters expired), which PTTL tells.
  if redis.call('PEXPIRE', k, life, 'GT') == 0 and not (last < now and now - last < 1000000)
      and redis.call('PTTL', k) == -1 then
    redis.call('PEXPIRE', k, life)
  end
  return tok
end

-- mint(on, fences, floor, lease) returns 0 when on is '0' (fencing off), and
-- otherwise raises every counter in fences to one new token,
-- larger than each of them (counter + 1) and no smaller than the time floor
-- in microseconds: floor, or this server's TIME when floor is not a number.
-- The counter alone goes backwards when Redis loses it together with the
-- lock (restart without persistence, failover to a replica that missed the
-- write) or when it expires; the time floor keeps the next token above
-- every earlier one as long as the clock that gives the floor is not behind
-- the one that floored the last token by more than the time since the
-- counter's last write (for an expired counter: its retention, at least).
-- It returns the token, or nil and the reply the script must give instead:
-- {REPLY_EXHAUSTED, counter} when a counter reached 2^53-1, where a Lua
-- double can no longer count up by one, or {REPLY_BAD_FENCE, 0} when a
-- fence key holds something that is not a number. Nothing is written then.
--
-- on is also the counters' retention (see retention): they expire that long
-- after this write, or at the end of the lease (ms) being granted, or when
-- they were to already, whichever is last.
--
-- fences is one key, or a list of them: a script that mints for one name
-- passes its key as it is, and builds no table for it.
local function mint(on, fences, floor, lease)
  if on == '0' or not on then return 0 end
  local ms, life = retention(on)
  local l = tonumber(lease)
  if l > ms then ms, life = l, l end
  local now = tonumber(floor)
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    floor = nil
  elseif now >= 9007199254740992 then
    floor = nil -- beyond what a double holds exactly: written as now
  end
  if type(fences) == 'string' then return mintone(fences, now, life, floor) end
  if #fences == 1 then return mintone(fences[1], now, life, floor) end
  local tok = 0
  for _, k in ipairs(fences) do
    local last = tonumber(redis.call('GET', k) or '0')
    if not counter(last) then return nil, {REPLY_BAD_FENCE, 0} end
    if last >= 9007199254740991 then return nil, {REPLY_EXHAUSTED, last} end
    if last + 1 > tok then tok = last + 1 end
  end
  if now > tok then tok = now end
  -- %.0f: tostring() would print 1.8e+15 and lose digits of a µs timestamp.
  local s = string.format('%.0f', tok)
  for _, k in ipairs(fences) do
    redis.call('SET', k, s, 'PX', math.max(ms, redis.call('PTTL', k)))
  end
  return tok
end

-- fencearg(arg) splits a script's fencing argument into mint's on and
-- floor: "0" (no token), "<retention>:<floor>", the floor alone for the
-- default retention (a number of at least 10^15, which no retention
-- reaches), or a retention alone (no floor: the server's TIME). acquire.lua
-- reads the same forms with this code written out: its common path calls
-- no function.
local function fencearg(arg)
  local n = tonumber(arg)
  if n and n >= 1000000000000000 then return '1', arg end
  local sep = string.find(arg, ':', 1, true)
  if sep then return string.sub(arg, 1, sep - 1), string.sub(arg, sep + 1) end
  return arg, nil
end

-- minted(on, fence) is the token a grant of this very attempt minted
-- earlier, for a client-side retry after a lost reply: the counter at fence
-- (0 when on is '0').
local function minted(on, fence)
  if on == '0' or not on then return 0 end
  return tonumber(redis.call('GET', fence) or '0') or 0
end

-- nowms is the server's time in milliseconds: the clock of the expiry
-- scores in read-hold and permit sets.
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The queue of waiting writers of a name (Locker only) is one sorted set,
-- "<lock key>:queue" (kinds.go's queueSuffix), which every script that
-- touches it declares in its KEYS: a key per waiter, built inside a script,
-- would not be, and on Redis Cluster a script fails at the first undeclared
-- key that a slot migration has already moved. It holds two members per
-- waiting writer: "o:<id>", scored by its place (arrival order, counting up
-- from -2^52, so below zero), and "a:<id>", scored by the server time in ms
-- at which the entry lapses unless its Lock call tries again (5s after
-- each refused attempt), so that a crashed waiter never blocks the queue.
-- The set expires 5s after the last refusal. The strings mirror kinds.go:
-- 'queued:' reservedPrefix and 'w:' passedPrefix; they never change (see
-- kinds.go).

-- enqueue enters or renews writer id in the queue q: a new id (or one whose
-- entry lapsed, or whose turn came and went) goes to the tail. It returns
-- false, entering nothing, for an id that withdrew (unwait.lua leaves
-- "a:<id>" scored 0 while the queue lives): an attempt of a Lock call that
-- gave up can reach the server after the call's withdrawal, and a release
-- would then reserve the name for a writer that left.
local function enqueue(q, id)
  local now = nowms()
  local alive = redis.call('ZSCORE', q, 'a:' .. id)
  if alive == '0' then return false end
  if not alive or tonumber(alive) <= now then
    local last = redis.call('ZREVRANGEBYSCORE', q, '(0', '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    local place = -4503599627370496
    if last[2] then place = tonumber(last[2]) + 1 end
    -- Both of a new entry's members in one call.
    redis.call('ZADD', q, place, 'o:' .. id, now + 5000, 'a:' .. id)
  else
    redis.call('ZADD', q, now + 5000, 'a:' .. id)
  end
  redis.call('PEXPIRE', q, 5000)
  return true
end

-- dequeue takes writer id out of the queue q.
local function dequeue(q, id)
  redis.call('ZREM', q, 'o:' .. id, 'a:' .. id)
end

-- firstwaiter returns the id of the first live waiting writer in the queue
-- q and the ms until its entry lapses, dropping dead ones from the head
-- (at most 16), or nil.
local function firstwaiter(q)
  local now
  for _ = 1, 16 do
    local first = redis.call('ZRANGEBYSCORE', q, '-inf', '(0', 'LIMIT', 0, 1)[1]
    if not first then return nil end
    local id = string.sub(first, 3)
    local alive = redis.call('ZSCORE', q, 'a:' .. id)
    now = now or nowms()
    if alive and tonumber(alive) > now then return id, tonumber(alive) - now end
    dequeue(q, id)
  end
  return nil
end

-- waiting marks that a refused caller waits for the holder's release: the
-- key flag ("<lock key>:waiting") lives the holder's lease left (pttl ms,
-- below 0 for none) plus 10 s. A release publishes only while it is there
-- (release.lua), so that a release nobody waits for sends nothing. A
-- waiter sleeps no longer than the lease or a second before it tries again
-- (and so renews the mark), unless a retry policy of its own makes it
-- sleep longer than 10 s; messages only ever woke that one earlier.
local function waiting(flag, pttl)
  redis.call('SET', flag, '1', 'PX', math.max(pttl, 0) + 10000)
end

-- publishto(channel, message) publishes message on channel with
-- PUBLISH_COMMAND: PUBLISH, or, in the scripts run on a Cluster, SPUBLISH,
-- whose message stays on the shard that owns the channel's slot instead of
-- crossing the cluster bus to every node. Where SPUBLISH fails (a server
-- before 7.0) it falls back to PUBLISH. It returns the reply, an error table
-- when the server refused it.
local function publishto(channel, message)
  local res = redis.pcall(PUBLISH_COMMAND, channel, message)
  if PUBLISH_COMMAND ~= 'PUBLISH' and type(res) == 'table' and res.err then
    res = redis.pcall('PUBLISH', channel, message)
  end
  return res
end

-- pass gives up lock, which the caller holds: to the first live waiting
-- writer in the queue q, for which it is reserved ("queued:<id>", for at
-- most reserve ms) and woken alone by "w:<id>" on channel; or, with nobody
-- queued, it frees the name and publishes released, which wakes every
-- waiter. It returns PUBLISH's reply, an error table when the server
-- refused it. Its first write (ZREM or DEL) is one a full server accepts,
-- so it frees the name at maxmemory too, and writes after it in the
-- script pass (see scripts.go).
local function pass(lock, q, channel, released, reserve)
  local id = firstwaiter(q)
  if id then
    dequeue(q, id)
    redis.call('SET', lock, PREFIX_RESERVED .. id, 'PX', reserve)
    return publishto(channel, PREFIX_PASSED .. id)
  end
  redis.call('DEL', lock)
  return publishto(channel, released)
end

-- checktoken(mark, token) checks a fencing token (ARGV, a decimal string)
-- against the mark key mark of RedisFence (fencing.go): the highest token
-- admitted for one guarded key, stored as the caller's decimal string,
-- never through tostring(), which prints 1800000000000001 as "1.8e+15".
-- Tokens are compared as Lua numbers (doubles), exact for integers up to
-- 2^53, which the client enforces. It returns whether the mark must be
-- raised to token (true: no mark yet, or a lower one; false: an equal
-- one, which one holder presents for each of its writes) when token is
-- admitted; or nil and what the script must reply instead, having changed
-- nothing: an error for a token that is not a number of at least 1 or a
-- mark that does not hold an integer, {REPLY_STALE, mark} for a token below
-- the mark (a later holder was admitted).
local function checktoken(mark, token)
  local t = tonumber(token)
  if not t or t < 1 then
    return nil, redis.error_reply('ERR redlock fence: invalid token ' .. tostring(token))
  end
  local m = redis.call('GET', mark)
  if not m then return true end
  local highest = tonumber(m)
  if not highest then
    return nil, redis.error_reply('ERR redlock fence: mark key ' .. mark .. ' does not hold an integer')
  end
  if t < highest then return nil, {REPLY_STALE, m} end
  return t > highest
end
