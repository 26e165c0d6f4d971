// Package scripts holds the Lua scripts of the library, assembled with the
// helpers of _lib.lua they call, the reply codes they answer with and the
// key schema they share with the Go code. It knows nothing of locks: the
// engine says which script a lock runs (internal/engine/kinds.go) and reads the
// replies.
package scripts

import (
	"embed"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/luasrc"
)

var (
	Acquire = NewScript("acquire.lua")
	Release = NewScript("release.lua")
	Retract = NewScript("retract.lua")
	Repair  = NewScript("repair.lua")
	Extend  = NewScript("extend.lua")
	Raise   = NewScript("raise.lua")
	HandOff = NewScript("handoff.lua")
	Inspect = NewScript("inspect.lua")
	PTTL    = NewScript("pttl.lua")

	// Read holds (RLock) and permits (Semaphore): sorted sets of owners.
	RLock      = NewScript("rlock.lua")
	SemAcquire = NewScript("sem_acquire.lua")
	ZExtend    = NewScript("zextend.lua")
	ZRelease   = NewScript("zrelease.lua")
	ZPTTL      = NewScript("zpttl.lua")
	Unwait     = NewScript("unwait.lua")

	// Multi-name locks (LockAll).
	MultiAcquire = NewScript("multi_acquire.lua")
	MultiRelease = NewScript("multi_release.lua")
	MultiExtend  = NewScript("multi_extend.lua")
	MultiPTTL    = NewScript("multi_pttl.lua")

	// Leader election (election.go).
	Proclaim = NewScript("proclaim.lua")

	// Keep keeps a lock's companion keys alive apart from its
	// renewal (companions, internal/engine/kinds.go).
	Keep = NewScript("keep.lua")

	// All are loaded into each node's cache when a Locker or Redlock
	// is made, so the first call pays no NOSCRIPT round trip. The others
	// load on first use (EVALSHA, then EVAL once).
	All = []*redis.Script{Acquire, Release, Retract, Extend, Raise, HandOff, Inspect, PTTL, Keep}
)

// Reply codes: the one table of what the scripts answer, each code with
// one meaning in every script that gives it. The scripts name them
// REPLY_OK, REPLY_NOT_OURS and so on (the Go name in capitals, words split
// by "_"), and NewScript writes in the values below, so a script and its
// Go reader cannot drift apart. Which script gives which code is in each
// script's header; TestScripts checks them against a real server.
//
// A script's reply is a code, or a list whose first element is one:
//
//	acquire family (acquire, multi_acquire, rlock, sem_acquire, handoff):
//	  {ReplyOK, token} granted (acquire: the token alone, an integer);
//	  {ReplyTaken, pttl, owner} refused;
//	  {ReplyExhausted, counter}, {ReplyBadFence, 0}, {ReplyPermits, count},
//	  and for handoff {ReplyAlready, 0}, {ReplyNotOurs, 0},
//	  {ReplyWriterFirst, 0}, {ReplyOOM, 0}
//	release family (release, multi_release, zrelease): ReplyOK,
//	  ReplyUnpublished, ReplyAlready, ReplyNotOurs
//	extend family (extend, multi_extend, zextend): ReplyOK, ReplyGone,
//	  ReplyTaken, ReplyLate
//	pttl family (pttl, multi_pttl, zpttl): a lease in ms (-1: no expiry),
//	  ReplyNotOurs, or (pttl, multi_pttl) ReplyOthers
//	fence scripts: {ReplyOK}, {ReplyStale, mark}
//	repair: ReplyOK, ReplyTaken
//	unwait: ReplyOK. raise and inspect answer values, never a code.
//
// No code is -1 or -2, the values of PTTL for a key without expiry and for
// no key, so that a reply that is a lease keeps PTTL's meanings; the pttl
// family's ReplyNotOurs is negative to stay apart from every lease. The
// watchdog's per-lock int8 codes (pipelined.code, extendCode: 1 extended,
// 0 not, -1 error) carry ReplyTaken and ReplyLate as they are, so
// ReplyOK is 1, ReplyGone 0, and those two positive below 128
// (TestReplyCodes).
const (
	// ReplyOK: done as asked. The lock, hold or permit is granted; the
	// release is made and its wake-up published; the lease moved; the
	// fencing token admitted; the waiting writer withdrawn.
	ReplyOK = 1
	// ReplyGone (extend family): no key or hold of this owner is left, gone
	// or its lease ended; a key of another owner is ReplyTaken.
	ReplyGone = 0
	// ReplyTaken: someone else has it: another owner's value (acquire and
	// extend families), and for an acquisition also live read holds, every
	// permit held, or a waiting writer ahead (rlock).
	ReplyTaken = 2
	// ReplyLate (extend family): ours, but the lease has less left than the
	// lock's guard, so its holder has declared it lost, or is about to: a
	// renewal that a paused server ran late must not bring it back.
	ReplyLate = 3
	// ReplyAlready (release family, handoff): this owner released it
	// before: a retried call after a lost reply.
	ReplyAlready = 4
	// ReplyUnpublished (release family): released, but the server refused
	// the PUBLISH (an ACL user without channel rights); waiters wake by
	// their timers.
	ReplyUnpublished = 5
	// ReplyWriterFirst (handoff): a writer of another process waits first
	// in the name's queue; nothing changed, and the ordinary release must
	// pass the name to it.
	ReplyWriterFirst = 6
	// ReplyStale (fence scripts, with the mark): a higher token was
	// admitted before; nothing changed.
	ReplyStale = 7
	// ReplyNotOurs (release and pttl families, handoff): gone or another
	// owner's, the script does not tell which; left as it was.
	ReplyNotOurs = -3
	// ReplyOOM (handoff): the server refused its first write (maxmemory);
	// nothing changed, and the ordinary release must run.
	ReplyOOM = -4
	// ReplyExhausted (acquire family): a fence counter reached 2^53-1,
	// where a Lua double can no longer count up by one; not granted.
	ReplyExhausted = -5
	// ReplyBadFence (acquire family): a fence counter key holds something
	// that is not a number; not granted.
	ReplyBadFence = -6
	// ReplyPermits (sem_acquire): the live holders took their permits under
	// another permit count, which the reply gives; not granted.
	ReplyPermits = -7
	// ReplyOthers (pttl, multi_pttl): the key holds another owner's value;
	// their ReplyNotOurs then means it is gone.
	ReplyOthers = -8
)

// ReplyCodes are the reply codes by the names the scripts use.
var ReplyCodes = map[string]int64{
	"REPLY_OK":           ReplyOK,
	"REPLY_GONE":         ReplyGone,
	"REPLY_TAKEN":        ReplyTaken,
	"REPLY_LATE":         ReplyLate,
	"REPLY_ALREADY":      ReplyAlready,
	"REPLY_UNPUBLISHED":  ReplyUnpublished,
	"REPLY_WRITER_FIRST": ReplyWriterFirst,
	"REPLY_STALE":        ReplyStale,
	"REPLY_NOT_OURS":     ReplyNotOurs,
	"REPLY_OTHERS":       ReplyOthers,
	"REPLY_OOM":          ReplyOOM,
	"REPLY_EXHAUSTED":    ReplyExhausted,
	"REPLY_BAD_FENCE":    ReplyBadFence,
	"REPLY_PERMITS":      ReplyPermits,
}

// FS holds the scripts and _lib.lua.
//
//go:embed *.lua
var FS embed.FS

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

// NewScript loads an embedded script, with the helpers of scripts/_lib.lua
// it calls (mint, minted, nowms, the writers' queue,
// checktoken...; internal/luasrc picks them) in front, the default fence
// retention written in. go-redis runs it with EVALSHA and falls back to EVAL on NOSCRIPT,
// so a SCRIPT FLUSH, a restart or a failover to a node with an empty
// script cache costs one extra round trip, never an error.
//
// A script that publishes (publishto in _lib.lua) gets a sharded twin, the
// same script with SPUBLISH, which Lock.script picks on a Cluster.
func NewScript(name string) *redis.Script {
	s, publishes := assemble(name, "PUBLISH")
	if publishes {
		shardedTwin[s], _ = assemble(name, "SPUBLISH")
	}
	return s
}

// assemble builds one script with publishCmd as PUBLISH_COMMAND, and says
// whether it publishes.
func assemble(name, publishCmd string) (*redis.Script, bool) {
	retention := strconv.FormatInt(DefaultFenceRetention.Milliseconds(), 10)
	body := strings.ReplaceAll(string(Embedded(name)), "DEFAULT_FENCE_RETENTION_MS", retention)
	lib := strings.ReplaceAll(string(Embedded("_lib.lua")), "DEFAULT_FENCE_RETENTION_MS", retention)
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
	Sources[s] = scriptSource{SHA: s.Hash(), Body: src}
	return s, publishes
}

// shardedTwin maps each script that publishes to its twin that publishes
// with SPUBLISH (sharded pub/sub), for a core whose nodes are Clusters.
// Filled at init, only read after.
var shardedTwin = map[*redis.Script]*redis.Script{}

// Sharded returns s's sharded twin when on says so and s has one, else s.
func Sharded(s *redis.Script, on bool) *redis.Script {
	if on {
		if t := shardedTwin[s]; t != nil {
			return t
		}
	}
	return s
}

// Sources are each script's SHA1, boxed once for the EVALSHA
// commands that EvalArgs (internal/node) builds, and its body for EVAL. Filled at init,
// only read after.
var Sources = map[*redis.Script]scriptSource{}

type scriptSource struct {
	SHA  any
	Body string
}

// SchemaStrings are the key suffixes and value prefixes of the schema
// by the names the scripts use, so that each is written once.
var SchemaStrings = map[string]string{
	"SUFFIX_CHANNEL":  ChannelSuffix,
	"PREFIX_RESERVED": ReservedPrefix,
	"PREFIX_PASSED":   PassedPrefix,
	"PREFIX_UNMARKED": UnmarkedPrefix,
	"VALUE_READ_MARK": ReadMark,
}

// constant is the text of a constant a script names: a reply code's value
// or a schema string, quoted.
func constant(name string) (string, bool) {
	if v, ok := ReplyCodes[name]; ok {
		return strconv.FormatInt(v, 10), true
	}
	if v, ok := SchemaStrings[name]; ok {
		return strconv.Quote(v), true
	}
	return "", false
}

// Embedded is the text of an embedded file (a script or _lib.lua).
func Embedded(name string) []byte {
	src, err := FS.ReadFile(name)
	if err != nil {
		panic("redlock: missing embedded script " + name) // a build defect, not a runtime condition
	}
	return src
}

// The key schema: every key and channel of a name, which doc.go's "Keys"
// tells users. None of these strings may change: during a rollout two
// versions share the keys, and a process that spelled one otherwise would
// see no lock, queue or counter where there is one. Every key a script
// reads or writes is one the client passes in KEYS (TestScriptKeysDeclared):
// on Redis Cluster a script fails at the first key it did not declare that
// a slot migration has already moved. With K the lock key
// "{<prefix><name>}" (LockKey, internal/engine/keys.go):
//
//	K                  an owner value, ReservedPrefix + a queued writer's id,
//	                   or ReadMark while read holds are live
//	K:fence            fence counter
//	K:released         released marker: the owner that released
//	K:meta             metadata: "<owner>\n<metadata>"
//	K:readers          read holds; K:readers:released:<owner> (OwnerKey)
//	K:queue            waiting writers: a sorted set of their places and lapse times (_lib.lua)
//	K:waiting          "1" while a caller waits for a release (WaitSuffix)
//	K:sem              permits; K:sem:permits, K:sem:fence, K:sem:released:<owner>
//	K:rel              release channel: released owners, or PassedPrefix + an id
//	K:elect            election channel: "<term>\n<value>" (electionSuffix, election.go)
//	K:released-by-operator, <set>:released-by-operator:<owner>  Locker.Release
//
// The marks of a RedisFence are not a name's: fenceMarkKey (fencing.go).
const (
	FenceSuffix    = ":fence"
	ReleasedSuffix = ":released"
	MetaSuffix     = ":meta"
	ReadersSuffix  = ":readers" // read holds (RLock)
	QueueSuffix    = ":queue"   // writers waiting (writer preference, FIFO)
	WaitSuffix     = ":waiting" // someone waits for a release (_lib.lua's waiting)
	SemSuffix      = ":sem"     // a semaphore's set, after the lock key
	PermitsSuffix  = ":permits" // the permit count, after the set's key
	OperatorSuffix = ":released-by-operator"
	ChannelSuffix  = ":rel"

	// ReservedPrefix starts the value of a lock key that a release reserved
	// for a queued writer: "queued:<its id>" (pass, in _lib.lua).
	ReservedPrefix = "queued:"
	// PassedPrefix starts the message of a release that passed the name to
	// a queued writer: "w:<its id>".
	PassedPrefix = "w:"
	// UnmarkedPrefix starts the waiting writer's id that an attempt sends
	// (acquire.lua's ARGV[4]) while the caller's own Locker holds the name:
	// refused, it enters the queue of waiting writers but does not mark the
	// name waited for, as that holder's Unlock wakes it with no message.
	// Not part of any key or value.
	UnmarkedPrefix = "-"
	// ReadMark is the value of a lock key while read holds are live, so that
	// a writer's SET NX fails on it with no read of the holds (rlock.lua). No
	// owner value (a UUID) or reservation can equal it; it ends in a newline
	// so that keep.lua, given the owner ReadMarkOwner, keeps it alive.
	ReadMark = "read-held\n"
	// ReadMarkOwner is ReadMark as keep.lua's owner argument.
	ReadMarkOwner = "read-held"
)

// DefaultFenceRetention is WithFenceRetention's default, written into the
// scripts as well (NewScript), for the callers that do not send it.
const DefaultFenceRetention = 24 * time.Hour
