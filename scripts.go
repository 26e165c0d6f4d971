package redlock

import (
	"embed"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/luasrc"
)

var (
	scriptAcquire = newScript("acquire.lua")
	scriptRelease = newScript("release.lua")
	scriptRetract = newScript("retract.lua")
	scriptRepair  = newScript("repair.lua")
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

	// Leader election (election.go).
	scriptProclaim = newScript("proclaim.lua")

	// scriptKeep keeps a lock's companion keys alive apart from its
	// renewal (companions, kinds.go).
	scriptKeep = newScript("keep.lua")

	// allScripts are loaded into each node's cache when a Locker or Redlock
	// is made, so the first call pays no NOSCRIPT round trip. The others
	// load on first use (EVALSHA, then EVAL once).
	allScripts = []*redis.Script{scriptAcquire, scriptRelease, scriptRetract, scriptExtend, scriptRaise, scriptHandOff, scriptInspect, scriptPTTL, scriptKeep}
)

// Reply codes: the one table of what the scripts answer, each code with
// one meaning in every script that gives it. The scripts name them
// REPLY_OK, REPLY_NOT_OURS and so on (the Go name in capitals, words split
// by "_"), and newScript writes in the values below, so a script and its
// Go reader cannot drift apart. Which script gives which code is in each
// script's header; TestScripts checks them against a real server.
//
// A script's reply is a code, or a list whose first element is one:
//
//	acquire family (acquire, multi_acquire, rlock, sem_acquire, handoff):
//	  {replyOK, token} granted (acquire: the token alone, an integer);
//	  {replyTaken, pttl, owner} refused;
//	  {replyExhausted, counter}, {replyBadFence, 0}, {replyPermits, count},
//	  and for handoff {replyAlready, 0}, {replyNotOurs, 0},
//	  {replyWriterFirst, 0}, {replyOOM, 0}
//	release family (release, multi_release, zrelease): replyOK,
//	  replyUnpublished, replyAlready, replyNotOurs
//	extend family (extend, multi_extend, zextend): replyOK, replyGone,
//	  replyTaken, replyLate
//	pttl family (pttl, multi_pttl, zpttl): a lease in ms (-1: no expiry),
//	  replyNotOurs, or (pttl, multi_pttl) replyOthers
//	fence scripts: {replyOK}, {replyStale, mark}
//	repair: replyOK, replyTaken
//	unwait: replyOK. raise and inspect answer values, never a code.
//
// No code is -1 or -2, the values of PTTL for a key without expiry and for
// no key, so that a reply that is a lease keeps PTTL's meanings; the pttl
// family's replyNotOurs is negative to stay apart from every lease. The
// watchdog's per-lock int8 codes (pipelined.code, extendCode: 1 extended,
// 0 not, -1 error) carry replyTaken and replyLate as they are, so
// replyOK is 1, replyGone 0, and those two positive below 128
// (TestReplyCodes).
const (
	// replyOK: done as asked. The lock, hold or permit is granted; the
	// release is made and its wake-up published; the lease moved; the
	// fencing token admitted; the waiting writer withdrawn.
	replyOK = 1
	// replyGone (extend family): no key or hold of this owner is left, gone
	// or its lease ended; a key of another owner is replyTaken.
	replyGone = 0
	// replyTaken: someone else has it: another owner's value (acquire and
	// extend families), and for an acquisition also live read holds, every
	// permit held, or a waiting writer ahead (rlock).
	replyTaken = 2
	// replyLate (extend family): ours, but the lease has less left than the
	// lock's guard, so its holder has declared it lost, or is about to: a
	// renewal that a paused server ran late must not bring it back.
	replyLate = 3
	// replyAlready (release family, handoff): this owner released it
	// before: a retried call after a lost reply.
	replyAlready = 4
	// replyUnpublished (release family): released, but the server refused
	// the PUBLISH (an ACL user without channel rights); waiters wake by
	// their timers.
	replyUnpublished = 5
	// replyWriterFirst (handoff): a writer of another process waits first
	// in the name's queue; nothing changed, and the ordinary release must
	// pass the name to it.
	replyWriterFirst = 6
	// replyStale (fence scripts, with the mark): a higher token was
	// admitted before; nothing changed.
	replyStale = 7
	// replyNotOurs (release and pttl families, handoff): gone or another
	// owner's, the script does not tell which; left untouched.
	replyNotOurs = -3
	// replyOOM (handoff): the server refused its first write (maxmemory);
	// nothing changed, and the ordinary release must run.
	replyOOM = -4
	// replyExhausted (acquire family): a fence counter reached 2^53-1,
	// where a Lua double can no longer count up by one; not granted.
	replyExhausted = -5
	// replyBadFence (acquire family): a fence counter key holds something
	// that is not a number; not granted.
	replyBadFence = -6
	// replyPermits (sem_acquire): the live holders took their permits under
	// another permit count, which the reply gives; not granted.
	replyPermits = -7
	// replyOthers (pttl, multi_pttl): the key holds another owner's value;
	// their replyNotOurs then means it is gone.
	replyOthers = -8
)

// replyCodes are the reply codes by the names the scripts use.
var replyCodes = map[string]int64{
	"REPLY_OK":           replyOK,
	"REPLY_GONE":         replyGone,
	"REPLY_TAKEN":        replyTaken,
	"REPLY_LATE":         replyLate,
	"REPLY_ALREADY":      replyAlready,
	"REPLY_UNPUBLISHED":  replyUnpublished,
	"REPLY_WRITER_FIRST": replyWriterFirst,
	"REPLY_STALE":        replyStale,
	"REPLY_NOT_OURS":     replyNotOurs,
	"REPLY_OTHERS":       replyOthers,
	"REPLY_OOM":          replyOOM,
	"REPLY_EXHAUSTED":    replyExhausted,
	"REPLY_BAD_FENCE":    replyBadFence,
	"REPLY_PERMITS":      replyPermits,
}

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
// (acquire.lua's SET NX, mint's SET, or enqueue's for a waiting writer):
// a lock on a name that read holds keep is then refused with OOM, not as
// taken, since its SET NX comes before it looks at them. The exceptions
// are where the script prunes expired read holds or permits first
// (ZREMRANGEBYSCORE): a read hold, a permit of a semaphore that has
// holders. Those go through, for the memory of one key or member.

// newScript loads an embedded script, with the helpers of scripts/_lib.lua
// it calls (mint, minted, nowms, the writers' queue,
// checktoken...; internal/luasrc picks them) in front, the default fence
// retention written in. go-redis runs it with EVALSHA and falls back to EVAL on NOSCRIPT,
// so a SCRIPT FLUSH, a restart or a failover to a node with an empty
// script cache costs one extra round trip, never an error.
//
// A script that publishes (publishto in _lib.lua) gets a sharded twin, the
// same script with SPUBLISH, which Lock.script picks on a Cluster.
func newScript(name string) *redis.Script {
	s, publishes := assemble(name, "PUBLISH")
	if publishes {
		shardedTwin[s], _ = assemble(name, "SPUBLISH")
	}
	return s
}

// assemble builds one script with publishCmd as PUBLISH_COMMAND, and says
// whether it publishes.
func assemble(name, publishCmd string) (*redis.Script, bool) {
	body := string(embedded(name))
	lib := strings.ReplaceAll(string(embedded("_lib.lua")), "DEFAULT_FENCE_RETENTION_MS",
		strconv.FormatInt(defaultFenceRetention.Milliseconds(), 10))
	publishes := false
	src, err := luasrc.Assemble(lib, body, func(name string) (string, bool) {
		if name == "PUBLISH_COMMAND" {
			publishes = true
			return strconv.Quote(publishCmd), true
		}
		return constant(name)
	})
	if err != nil {
		panic("redlock: script " + name + ": " + err.Error()) // a build defect, not a runtime condition
	}
	s := redis.NewScript(src)
	scriptSources[s] = scriptSource{sha: s.Hash(), body: src}
	return s, publishes
}

// shardedTwin maps each script that publishes to its twin that publishes
// with SPUBLISH (sharded pub/sub), for a core whose nodes are Clusters.
// Filled at init, only read after.
var shardedTwin = map[*redis.Script]*redis.Script{}

// sharded returns s's sharded twin when on says so and s has one, else s.
func sharded(s *redis.Script, on bool) *redis.Script {
	if on {
		if t := shardedTwin[s]; t != nil {
			return t
		}
	}
	return s
}

// scriptSources are each script's SHA1, boxed once for the EVALSHA
// commands that evalArgs builds, and its body for EVAL. Filled at init,
// only read after.
var scriptSources = map[*redis.Script]scriptSource{}

type scriptSource struct {
	sha  any
	body string
}

// schemaStrings are the key suffixes and value prefixes of the schema
// (keys.go) by the names the scripts use, so that each is written once.
var schemaStrings = map[string]string{
	"SUFFIX_CHANNEL":  channelSuffix,
	"PREFIX_RESERVED": reservedPrefix,
	"PREFIX_PASSED":   passedPrefix,
	"VALUE_READ_MARK": readMark,
}

// constant is the text of a constant a script names: a reply code's value
// or a schema string, quoted.
func constant(name string) (string, bool) {
	if v, ok := replyCodes[name]; ok {
		return strconv.FormatInt(v, 10), true
	}
	if v, ok := schemaStrings[name]; ok {
		return strconv.Quote(v), true
	}
	return "", false
}

func embedded(name string) []byte {
	src, err := scriptFS.ReadFile("scripts/" + name)
	if err != nil {
		panic("redlock: missing embedded script " + name) // a build defect, not a runtime condition
	}
	return src
}
