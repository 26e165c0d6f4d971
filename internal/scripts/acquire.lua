-- acquire.lua: take the lock if free and mint its fencing token, in one round trip.
--
-- KEYS[1]  lock key        "{<prefix><name>}"; holds readMark (kinds.go)
--          while read holds are live (rlock.lua), so SET NX fails then too
-- KEYS[2]  fence counter   "{<prefix><name>}:fence"  (expires its retention
--          after the last grant, see mint in _lib.lua)
-- KEYS[3]  the queue of waiting writers "{<prefix><name>}:queue" (_lib.lua);
--          given by a Lock call that waits, and with metadata
-- KEYS[4]  the waiting mark "{<prefix><name>}:waiting" (waiting in
--          _lib.lua); given with KEYS[3]
-- KEYS[5]  metadata        "{<prefix><name>}:meta"   (only with ARGV[5])
-- ARGV[1]  owner value (a fresh UUID per attempt)
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  "0" to skip the fencing token; otherwise "<retention>:<floor>":
--          mint one, keeping the counter for <retention> ms ("1" for the
--          default), no smaller than <floor>, the client's clock in µs
--          (a Redlock proposes one floor to all masters, so that they mint
--          the same token and need no write-back round). Without ":<floor>"
--          the floor is this server's TIME. The floor alone, a number of
--          at least 10^15 (no retention reaches it: time.Duration ends at
--          9.3*10^12 ms), stands for "1:<floor>": the library's form for
--          the default retention, which spares the script splitting it.
-- ARGV[4]  the id of a Lock call that waits, in the queue of waiting
--          writers: the owner value of its first attempt; "" for a call
--          that does not wait. Absent: ARGV[1] when KEYS[3] is given (a
--          waiting call's first attempt), else "". A refused waiting call
--          enters or renews its id and marks the name waited for; a name
--          reserved for it ("queued:<id>", see pass) is its to take.
--          '-' before the id (UnmarkedPrefix): the caller's own process
--          holds the name, and wakes it at its release without a message,
--          so a refusal enters the id but does not mark the name.
-- ARGV[5]  metadata value "<owner>\n<metadata>" (WithMetadata), stored at
--          KEYS[5] with the lock's TTL; absent without metadata
--
-- Every key the script reads or writes is in KEYS (TestScriptKeysDeclared).
-- They share the lock key's hash tag, so they live in one slot. The call is
-- kept short all the same: an unauthenticated connection may send no more
-- than 10 arguments, and a refusal should read NOAUTH, so a TryLock on one
-- server sends 8 (EVALSHA, SHA, 2, two keys, three arguments) and the
-- first attempt of a Lock 10 (the queue and waiting keys, and no ARGV[4]).
-- 'queued:' mirrors kinds.go's reservedPrefix.
--
-- Returns the token alone, an integer, when the lock is ours (0 with
-- fencing off: a bare integer costs the server less to reply than a
-- table), {REPLY_TAKEN, pttl, owner} when another owner holds it (pttl: its
-- remaining lease in ms, -1 for a key without expiry; owner: the value it
-- holds, "queued:<id>" while reserved for a waiting writer, "" when read
-- holds refuse it, pttl then being the longest of their leases),
-- {REPLY_EXHAUSTED, counter} or {REPLY_BAD_FENCE, 0} when no token can be
-- minted (see _lib.lua): the lock is not taken, since a repeated token
-- would let a fence admit two owners. Reply codes: the table in scripts.go.
--
-- An uncontended call runs three commands: SET NX GET takes the name (its
-- only read: when the name is taken, it answers the holder's value without
-- writing, so a refusal reads no more; read holds keep their mark in the
-- lock key, so they need no read of their own), and the token takes SET GET
-- and PEXPIRE (mint's common case, written out). It never touches the
-- queue; a failed mint deletes the key it set, so nothing changes then. It
-- calls no function and returns before the marker line below (--@lib), so
-- none of _lib.lua's functions is even defined for it (internal/luasrc).
local wid, marks = ARGV[4], true
if not wid then
  wid = (KEYS[3] and ARGV[1]) or ''
elseif string.sub(wid, 1, 1) == PREFIX_UNMARKED then
  wid, marks = string.sub(wid, 2), false
end
local on, floor = ARGV[3], nil
local tok = tonumber(on)
if tok and tok >= 1000000000000000 then
  on, floor = '1', ARGV[3]
else
  local arg, sep = on, string.find(on, ':', 1, true)
  -- Both halves from arg: gopher-lua (miniredis) assigns on before it
  -- computes the second.
  if sep then on, floor = string.sub(arg, 1, sep - 1), string.sub(arg, sep + 1) end
  tok = tonumber(floor)
end
local cur = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'GET', 'PX', ARGV[2])
if not cur and (wid == '' or wid == ARGV[1]) then
  -- The name was free and no earlier refusal of this call queued it: what
  -- the code after --@lib would do then, written out without a function
  -- (each one a script defines is a closure made on every run, and a call
  -- costs more than most of the code in it: 4% of an uncontended pair's
  -- server work, BENCHMARKS.md "Fifth round"). This is mint (_lib.lua)
  -- for one counter and a floor from the client, when the counter is below
  -- the floor or absent. Otherwise (no floor, or one past 2^53; a counter
  -- at or past the floor, or not a number) the counter is put back as it
  -- was and mint decides, below.
  if on == '0' then
    tok = 0
  elseif tok and tok < 9007199254740992 then
    -- The counter's life: on as _lib.lua's retention reads it (as text),
    -- or the lease when longer. tonumber costs about 2% of the pair each
    -- time (strtod), so the default's life is compared by length: SET PX
    -- took ARGV[2], so it is an integer without leading zeros, and one of
    -- fewer digits than the default is shorter.
    local life = 'DEFAULT_FENCE_RETENTION_MS'
    if on == '1' then
      if #ARGV[2] >= #life and tonumber(ARGV[2]) > DEFAULT_FENCE_RETENTION_MS then life = ARGV[2] end
    else
      local ms = tonumber(on)
      if ms and ms > 1 then life = ms else ms = DEFAULT_FENCE_RETENTION_MS end
      if tonumber(ARGV[2]) > ms then life = ARGV[2] end
    end
    local old = redis.call('SET', KEYS[2], floor, 'KEEPTTL', 'GET')
    local last = tonumber(old)
    if not old then
      redis.call('PEXPIRE', KEYS[2], life)
    elseif last and last + 1 <= tok and last ~= -math.huge then
      -- As in mintone: an expiry only moves later; a refusal within a
      -- second of the last grant's floor is that grant's own expiry, else
      -- PTTL tells whether the counter has none.
      if redis.call('PEXPIRE', KEYS[2], life, 'GT') == 0 and tok - last >= 1000000
          and redis.call('PTTL', KEYS[2]) == -1 then
        redis.call('PEXPIRE', KEYS[2], life)
      end
    else
      redis.call('SET', KEYS[2], old, 'KEEPTTL')
      tok = nil
    end
  else
    tok = nil
  end
  if tok then
    if ARGV[5] then redis.call('SET', KEYS[5], ARGV[5], 'PX', ARGV[2]) end
    return tok
  end
end
--@lib
local claimed = false
if cur then
  if cur == ARGV[1] then
    -- Our own earlier execution of this very attempt (a client-side retry
    -- after a lost reply): report the grant it made instead of a false
    -- "taken".
    return minted(on, KEYS[2])
  end
  if wid == '' or cur ~= PREFIX_RESERVED .. wid then
    local pttl = redis.call('PTTL', KEYS[1])
    if wid ~= '' and enqueue(KEYS[3], wid) and marks then
      waiting(KEYS[4], pttl)
    end
    if cur == VALUE_READ_MARK then cur = '' end
    return {REPLY_TAKEN, pttl, cur}
  end
  claimed = true -- our turn: pass took us off the queue
end
local tok, refused = mint(on, KEYS[2], floor, ARGV[2])
if not tok then
  -- The name as it was: free, or still reserved for us.
  if not claimed then redis.call('DEL', KEYS[1]) end
  return refused
end
if claimed then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
if ARGV[5] then redis.call('SET', KEYS[5], ARGV[5], 'PX', ARGV[2]) end
if wid ~= '' and wid ~= ARGV[1] and not claimed then
  -- Entered by an earlier refusal, and the name was free: leave the queue.
  dequeue(KEYS[3], wid)
end
return tok
