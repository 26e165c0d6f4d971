package redlock

import (
	"embed"
	"regexp"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	scriptAcquire = newScript("acquire.lua")
	scriptRelease = newScript("release.lua")
	scriptExtend  = newScript("extend.lua")
	scriptRaise   = newScript("raise.lua")
	scriptHandOff = newScript("handoff.lua")
	scriptInspect = newScript("inspect.lua")
	scriptPTTL    = newScript("pttl.lua")

	// Read holds (RLock) and permits (Semaphore): sorted sets of owners.
	scriptRLock      = newScript("rlock.lua")
	scriptSemAcquire = newScript("sem_acquire.lua")
	scriptZExtend    = newScript("zextend.lua")
	scriptZRelease   = newScript("zrelease.lua")
	scriptZPTTL      = newScript("zpttl.lua")
	scriptUnwait     = newScript("unwait.lua")

	// Multi-name locks (LockAll).
	scriptMultiAcquire = newScript("multi_acquire.lua")
	scriptMultiRelease = newScript("multi_release.lua")
	scriptMultiExtend  = newScript("multi_extend.lua")
	scriptMultiPTTL    = newScript("multi_pttl.lua")

	// allScripts are loaded into each node's cache when a Locker or Redlock
	// is made, so the first call pays no NOSCRIPT round trip. The others
	// load on first use (EVALSHA, then EVAL once).
	allScripts = []*redis.Script{scriptAcquire, scriptRelease, scriptExtend, scriptRaise, scriptHandOff, scriptInspect, scriptPTTL}
)

// The scripts' replies that the engine tells apart.

// acquire.lua's status codes (the first element of its reply).
const (
	acqGranted   = 1
	acqTaken     = 0
	acqExhausted = -1 // the fence counter reached 2^53-1
	acqBadFence  = -2 // the fence key holds something that is not a number
	acqPermits   = -3 // sem_acquire.lua: the live holders use another permit count
)

// release.lua's replies; handoff.lua answers relNotOurs and relAlready
// alike, acqGranted when it handed the lock over, and acquire.lua's
// negative codes when it could mint no token.
const (
	relNotOurs     = 0 // gone or another owner's: left untouched
	relReleased    = 1
	relAlready     = 2 // this owner released it before: a retried call after a lost reply
	relUnpublished = 3 // released, but PUBLISH was refused (an ACL user without channel rights)
)

// extend.lua's replies besides 1 (moved) and 0 (the key is gone).
const (
	extTaken = 2 // the key holds another owner's value
	// extLate: the lease has less left than the lock's guard, so its holder
	// has declared it lost, or is about to: a renewal that a paused server
	// ran late must not bring it back.
	extLate = 3
)

// handOffRefused is handoff.lua's reply when the server refused its first
// write (maxmemory): nothing changed, and the ordinary release must run.
const handOffRefused = -4

// pttlGone is pttl.lua's reply for a key that is not ours.
const pttlGone = -3

//go:embed scripts/*.lua
var scriptFS embed.FS

// Scripts and maxmemory. With maxmemory-policy noeviction and the memory
// full, Redis 7.0 refuses a command that may grow memory (SET, ZADD, RPUSH,
// INCR: "-OOM command not allowed when used memory > 'maxmemory'"), but
// not DEL, PEXPIRE, ZREM, LPOP, LREM or PUBLISH. A script without a shebang
// line is not refused up front: each redis.call is checked, and only a
// growing write that comes before any other write in the script is refused
// (a script that already wrote is let through to its end, since Redis
// cannot stop it half done). So every script that gives up or renews a
// hold writes first what a full server accepts (DEL, LPOP, ZREM, PEXPIRE)
// and only then what it grows by (a released marker, a reservation, a new
// score), and writes its released marker with pcall, whose refusal could
// only cost a retried release its "already released" answer. No script
// has a shebang: "#!lua" without flags is refused whole at maxmemory, even
// a read-only one, and "#!lua flags=allow-oom" would let acquisitions grow
// a full server too; neither is understood by servers before 7.0.
// Acquisitions are refused at maxmemory, by their first growing write
// (mint's SET, or enqueue's for a waiting writer), except where the script
// prunes expired read holds or permits first (ZREMRANGEBYSCORE): a read
// hold, a permit of a semaphore that has holders, a lock on a name whose
// read holds all ended but whose set has not expired yet. Those go through,
// for the memory of one key or member.

// newScript loads an embedded script, with the helpers of scripts/_lib.lua
// (mint, minted, keepcounter, nowms, the writers' queue, checktoken), in
// which it writes the default fence retention, in front when it calls one
// of them. go-redis runs it with EVALSHA and falls back to EVAL on NOSCRIPT,
// so a SCRIPT FLUSH, a restart or a failover to a node with an empty
// script cache costs one extra round trip, never an error.
func newScript(name string) *redis.Script {
	body := string(embedded(name))
	lib := strings.ReplaceAll(string(embedded("_lib.lua")), "DEFAULT_FENCE_RETENTION_MS",
		strconv.FormatInt(defaultFenceRetention.Milliseconds(), 10))
	for _, m := range libFunc.FindAllStringSubmatch(lib, -1) {
		if strings.Contains(body, m[1]+"(") {
			return redis.NewScript(lib + body)
		}
	}
	return redis.NewScript(body)
}

// libFunc finds the names of _lib.lua's functions.
var libFunc = regexp.MustCompile(`(?m)^local function (\w+)\(`)

func embedded(name string) []byte {
	src, err := scriptFS.ReadFile("scripts/" + name)
	if err != nil {
		panic("redlock: missing embedded script " + name) // a build defect, not a runtime condition
	}
	return src
}
