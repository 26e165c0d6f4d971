package redlock

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/luasrc"
	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/internal/scripts"
)

// TestReplyCodes: each code of the table in internal/scripts has one name, and
// the values keep the rules the table states.
func TestReplyCodes(t *testing.T) {
	t.Parallel()
	byValue := make(map[int64]string)
	for name, v := range scripts.ReplyCodes {
		if other, ok := byValue[v]; ok {
			t.Errorf("%s and %s are both %d, want one meaning per code", name, other, v)
		}
		byValue[v] = name
		if v == -1 || v == -2 {
			t.Errorf("%s = %d, a value PTTL gives a lease", name, v)
		}
	}
	if scripts.ReplyOK != 1 || scripts.ReplyGone != 0 {
		t.Errorf("replyOK, replyGone = %d, %d, want 1, 0 (the watchdog's per-lock yes and no)", scripts.ReplyOK, scripts.ReplyGone)
	}
	for name, v := range map[string]int64{"replyTaken": scripts.ReplyTaken, "replyLate": scripts.ReplyLate} {
		if v <= 1 || v > math.MaxInt8 {
			t.Errorf("%s = %d, want in [2, 127]: the watchdog's int8 codes carry it", name, v)
		}
	}
	if scripts.ReplyNotOurs >= 0 {
		t.Errorf("replyNotOurs = %d, want negative: the pttl family replies it instead of a lease", scripts.ReplyNotOurs)
	}

	// Every name is used by some script, and only these names are.
	used := make(map[string]bool)
	files, err := fs.Glob(scripts.FS, "*.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		src, err := fs.ReadFile(scripts.FS, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range luasrc.Constants(string(src)) {
			_, code := scripts.ReplyCodes[name]
			_, str := scripts.SchemaStrings[name]
			if !code && !str && name != "PUBLISH_COMMAND" { // assemble's, per twin
				t.Errorf("%s names %s, which is neither in replyCodes nor in schemaStrings", f, name)
			}
			used[name] = true
		}
	}
	for name := range scripts.ReplyCodes {
		if !used[name] {
			t.Errorf("no script names %s", name)
		}
	}
	for name := range scripts.SchemaStrings {
		if !used[name] {
			t.Errorf("no script names %s", name)
		}
	}
}

// between matches an int64 reply in [lo, hi]; anyInt any integer reply.
type between struct{ lo, hi int64 }

var anyInt = between{math.MinInt64, math.MaxInt64}

// queuedW enters writer "w" in the queue of waiting writers "K:queue"
// (_lib.lua), its entry lapsing in 4 to 5 seconds.
var queuedW = []any{"EVAL", "local t = redis.call('TIME') redis.call('ZADD', KEYS[1], -4503599627370496, 'o:w', t[1] * 1000 + 5000, 'a:w')", 1, "K:queue"}

// far is a score of a read hold or permit whose lease ends in the year
// 2286: live for the whole test.
const far = 9999999999999

// scriptCase is one call of a script on keys of its own. In keys, args and
// setup, "K" and strings starting with "K:" stand for the case's lock key
// and keys after it.
type scriptCase struct {
	name  string
	setup [][]any // commands run first
	full  bool    // run with the server full to maxmemory (fillMemory)
	noPub bool    // run as a user without channel rights: PUBLISH is refused
	keys  []string
	args  []any
	want  any    // int, string, between, or []any of those
	err   string // instead of want: the error contains this
}

// TestScripts runs every script's documented replies against a real
// redis-server, each case twice on fresh keys: first right after SCRIPT
// FLUSH (EVALSHA finds no script and go-redis falls back to EVAL; the
// watchdog's pipelines do the same themselves, see TestWatchdogScriptFlush),
// then with the script cached.
func TestScripts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	srv.ACLUser(t, "nopub", "pw", "~*", "+@all") // no channels: PUBLISH refused
	nopub := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "nopub", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { nopub.Close() })

	const maxFence = "9007199254740991"
	table := []struct {
		file   string
		script *redis.Script
		cases  []scriptCase
	}{
		{"acquire.lua", scripts.Acquire, []scriptCase{
			{name: "free", keys: []string{"K", "K:fence"}, args: []any{"me", 10000, "1:5000"},
				want: 5000},
			{name: "free, server's time", keys: []string{"K", "K:fence"}, args: []any{"me", 10000, "1"},
				want: between{1, math.MaxInt64}},
			{name: "fencing off", keys: []string{"K", "K:fence"}, args: []any{"me", 10000, "0"},
				want: 0},
			{name: "retry of this attempt", setup: [][]any{{"SET", "K", "me"}, {"SET", "K:fence", "42"}},
				keys: []string{"K", "K:fence"}, args: []any{"me", 10000, "1:5000"}, want: 42},
			{name: "counter ahead of the floor", setup: [][]any{{"SET", "K:fence", "42"}},
				keys: []string{"K", "K:fence"}, args: []any{"me", 10000, "1:5"}, want: 43},
			{name: "held", setup: [][]any{{"SET", "K", "other", "PX", 10000}},
				keys: []string{"K", "K:fence"}, args: []any{"me", 10000, "1:5000"},
				want: []any{scripts.ReplyTaken, between{1, 10000}, "other"}},
			{name: "held, waiting", setup: [][]any{{"SET", "K", "other", "PX", 10000}},
				keys: []string{"K", "K:fence", "K:queue", "K:waiting"}, args: []any{"me", 10000, "1:5000"},
				want: []any{scripts.ReplyTaken, between{1, 10000}, "other"}},
			{name: "read holds", setup: [][]any{{"SET", "K", scripts.ReadMark, "PX", 10000}},
				keys: []string{"K", "K:fence"}, args: []any{"me", 10000, "1:5000"},
				want: []any{scripts.ReplyTaken, between{1, 10000}, ""}},
			{name: "reserved for this writer", setup: [][]any{{"SET", "K", "queued:w", "PX", 1000}},
				keys: []string{"K", "K:fence", "K:queue", "K:waiting"}, args: []any{"me", 10000, "0", "w"},
				want: 0},
			{name: "reserved for this writer, unmarked", setup: [][]any{{"SET", "K", "queued:w", "PX", 1000}},
				keys: []string{"K", "K:fence", "K:queue", "K:waiting"}, args: []any{"me", 10000, "0", scripts.UnmarkedPrefix + "w"},
				want: 0},
			{name: "held, waiting unmarked", setup: [][]any{{"SET", "K", "other", "PX", 10000}},
				keys: []string{"K", "K:fence", "K:queue", "K:waiting"}, args: []any{"me", 10000, "1:5000", scripts.UnmarkedPrefix + "w"},
				want: []any{scripts.ReplyTaken, between{1, 10000}, "other"}},
			{name: "reserved for another writer", setup: [][]any{{"SET", "K", "queued:w", "PX", 1000}},
				keys: []string{"K", "K:fence", "K:queue", "K:waiting"}, args: []any{"me", 10000, "0", "me"},
				want: []any{scripts.ReplyTaken, between{1, 1000}, "queued:w"}},
			{name: "counter exhausted", setup: [][]any{{"SET", "K:fence", maxFence}},
				keys: []string{"K", "K:fence"}, args: []any{"me", 10000, "1:5000"},
				want: []any{scripts.ReplyExhausted, 9007199254740991}},
			{name: "counter not a number", setup: [][]any{{"SET", "K:fence", "nan"}},
				keys: []string{"K", "K:fence"}, args: []any{"me", 10000, "1:5000"},
				want: []any{scripts.ReplyBadFence, 0}},
			{name: "maxmemory", full: true, keys: []string{"K", "K:fence"}, args: []any{"me", 10000, "1:5000"},
				err: "OOM"},
		}},
		{"multi_acquire.lua", scripts.MultiAcquire, []scriptCase{
			{name: "free", keys: []string{"K:a", "K:b", "K:a:fence", "K:b:fence", "K:a:waiting", "K:b:waiting"},
				args: []any{"me", 10000, "1", "5000"}, want: []any{scripts.ReplyOK, 5000}},
			{name: "retry of this attempt", setup: [][]any{{"SET", "K:a", "me"}, {"SET", "K:a:fence", "9"}},
				keys: []string{"K:a", "K:b", "K:a:fence", "K:b:fence", "K:a:waiting", "K:b:waiting"},
				args: []any{"me", 10000, "1", ""}, want: []any{scripts.ReplyOK, 9}},
			{name: "second held", setup: [][]any{{"SET", "K:b", "other", "PX", 10000}},
				keys: []string{"K:a", "K:b", "K:a:fence", "K:b:fence", "K:a:waiting", "K:b:waiting"},
				args: []any{"me", 10000, "1", ""}, want: []any{scripts.ReplyTaken, between{1, 10000}, "other", 2}},
			{name: "read holds on first", setup: [][]any{{"SET", "K:a", scripts.ReadMark, "PX", 10000}},
				keys: []string{"K:a", "K:b", "K:a:fence", "K:b:fence", "K:a:waiting", "K:b:waiting"},
				args: []any{"me", 10000, "1", ""}, want: []any{scripts.ReplyTaken, anyInt, "", 1}},
			{name: "counter exhausted", setup: [][]any{{"SET", "K:b:fence", maxFence}},
				keys: []string{"K:a", "K:b", "K:a:fence", "K:b:fence", "K:a:waiting", "K:b:waiting"},
				args: []any{"me", 10000, "1", ""}, want: []any{scripts.ReplyExhausted, 9007199254740991}},
			{name: "counter not a number", setup: [][]any{{"SET", "K:a:fence", "x"}},
				keys: []string{"K:a", "K:b", "K:a:fence", "K:b:fence", "K:a:waiting", "K:b:waiting"},
				args: []any{"me", 10000, "1", ""}, want: []any{scripts.ReplyBadFence, 0}},
		}},
		{"rlock.lua", scripts.RLock, []scriptCase{
			{name: "free", keys: []string{"K", "K:readers", "K:queue", "K:waiting"}, args: []any{"me", 10000},
				want: []any{scripts.ReplyOK, 0}},
			{name: "retry of this attempt", setup: [][]any{{"ZADD", "K:readers", far, "me"}},
				keys: []string{"K", "K:readers", "K:queue", "K:waiting"}, args: []any{"me", 10000}, want: []any{scripts.ReplyOK, 0}},
			{name: "writer holds", setup: [][]any{{"SET", "K", "other", "PX", 10000}},
				keys: []string{"K", "K:readers", "K:queue", "K:waiting"}, args: []any{"me", 10000},
				want: []any{scripts.ReplyTaken, between{1, 10000}, "other"}},
			{name: "writer waits", setup: [][]any{queuedW},
				keys: []string{"K", "K:readers", "K:queue", "K:waiting"}, args: []any{"me", 10000},
				want: []any{scripts.ReplyTaken, between{1, 5000}, ""}},
		}},
		{"sem_acquire.lua", scripts.SemAcquire, []scriptCase{
			{name: "free", keys: []string{"K:sem", "K:sem:fence", "K:sem:permits"}, args: []any{"me", 10000, "0", 2},
				want: []any{scripts.ReplyOK, 0}},
			{name: "free, fenced", keys: []string{"K:sem", "K:sem:fence", "K:sem:permits"}, args: []any{"me", 10000, "1", 2},
				want: []any{scripts.ReplyOK, between{1, math.MaxInt64}}},
			{name: "retry of this attempt", setup: [][]any{{"ZADD", "K:sem", far, "me"}, {"SET", "K:sem:fence", "12"}},
				keys: []string{"K:sem", "K:sem:fence", "K:sem:permits"}, args: []any{"me", 10000, "1", 2},
				want: []any{scripts.ReplyOK, 12}},
			{name: "all held", setup: [][]any{{"ZADD", "K:sem", far, "other"}},
				keys: []string{"K:sem", "K:sem:fence", "K:sem:permits"}, args: []any{"me", 10000, "1", 1},
				want: []any{scripts.ReplyTaken, anyInt, "other"}},
			{name: "other permit count", setup: [][]any{{"SET", "K:sem:permits", "3"}},
				keys: []string{"K:sem", "K:sem:fence", "K:sem:permits"}, args: []any{"me", 10000, "1", 2},
				want: []any{scripts.ReplyPermits, 3}},
			{name: "counter exhausted", setup: [][]any{{"SET", "K:sem:fence", maxFence}},
				keys: []string{"K:sem", "K:sem:fence", "K:sem:permits"}, args: []any{"me", 10000, "1", 2},
				want: []any{scripts.ReplyExhausted, 9007199254740991}},
			{name: "counter not a number", setup: [][]any{{"SET", "K:sem:fence", "inf"}},
				keys: []string{"K:sem", "K:sem:fence", "K:sem:permits"}, args: []any{"me", 10000, "1", 2},
				want: []any{scripts.ReplyBadFence, 0}},
		}},
		{"handoff.lua", scripts.HandOff, []scriptCase{
			{name: "passed", setup: [][]any{{"SET", "K", "me", "PX", 10000}},
				keys: []string{"K", "K:fence", "K:released", "K:queue"}, args: []any{"me", "next", 10000, "0", ""},
				want: []any{scripts.ReplyOK, 0}},
			{name: "passed, fenced", setup: [][]any{{"SET", "K", "me", "PX", 10000}},
				keys: []string{"K", "K:fence", "K:released", "K:queue"}, args: []any{"me", "next", 10000, "1", ""},
				want: []any{scripts.ReplyOK, between{1, math.MaxInt64}}},
			{name: "passed, the lease in force kept", setup: [][]any{{"SET", "K", "me", "PX", 10000}},
				keys: []string{"K", "K:fence", "K:released", "K:queue"}, args: []any{"me", "next", "0", "1", ""},
				want: []any{scripts.ReplyOK, between{1, math.MaxInt64}}},
			{name: "passed to its queued writer", setup: [][]any{{"SET", "K", "me", "PX", 10000},
				queuedW},
				keys: []string{"K", "K:fence", "K:released", "K:queue"}, args: []any{"me", "next", 10000, "0", "w"},
				want: []any{scripts.ReplyOK, 0}},
			{name: "retry of this hand-off", setup: [][]any{{"SET", "K", "next", "PX", 10000}, {"SET", "K:fence", "77"}},
				keys: []string{"K", "K:fence", "K:released", "K:queue"}, args: []any{"me", "next", 10000, "1", ""},
				want: []any{scripts.ReplyOK, 77}},
			{name: "writer of another process first", setup: [][]any{{"SET", "K", "me", "PX", 10000},
				queuedW},
				keys: []string{"K", "K:fence", "K:released", "K:queue"}, args: []any{"me", "next", 10000, "0", ""},
				want: []any{scripts.ReplyWriterFirst, 0}},
			{name: "already released", setup: [][]any{{"SET", "K:released", "me", "PX", 10000}},
				keys: []string{"K", "K:fence", "K:released", "K:queue"}, args: []any{"me", "next", 10000, "0", ""},
				want: []any{scripts.ReplyAlready, 0}},
			{name: "gone", keys: []string{"K", "K:fence", "K:released", "K:queue"}, args: []any{"me", "next", 10000, "0", ""},
				want: []any{scripts.ReplyNotOurs, 0}},
			{name: "another owner's", setup: [][]any{{"SET", "K", "other", "PX", 10000}},
				keys: []string{"K", "K:fence", "K:released", "K:queue"}, args: []any{"me", "next", 10000, "0", ""},
				want: []any{scripts.ReplyNotOurs, 0}},
			{name: "counter exhausted", setup: [][]any{{"SET", "K", "me", "PX", 10000}, {"SET", "K:fence", maxFence}},
				keys: []string{"K", "K:fence", "K:released", "K:queue"}, args: []any{"me", "next", 10000, "1", ""},
				want: []any{scripts.ReplyExhausted, 9007199254740991}},
			{name: "counter not a number", setup: [][]any{{"SET", "K", "me", "PX", 10000}, {"SET", "K:fence", "x"}},
				keys: []string{"K", "K:fence", "K:released", "K:queue"}, args: []any{"me", "next", 10000, "1", ""},
				want: []any{scripts.ReplyBadFence, 0}},
			{name: "maxmemory", setup: [][]any{{"SET", "K", "me", "PX", 10000}}, full: true,
				keys: []string{"K", "K:fence", "K:released", "K:queue"}, args: []any{"me", "next", 10000, "0", ""},
				want: []any{scripts.ReplyOOM, 0}},
		}},
		{"release.lua", scripts.Release, []scriptCase{
			{name: "ours", setup: [][]any{{"SET", "K", "me", "PX", 10000}},
				keys: []string{"K", "K:released", "K:queue", "K:waiting"}, args: []any{"me", 10000, 1000}, want: scripts.ReplyOK},
			{name: "ours, waited for", setup: [][]any{{"SET", "K", "me", "PX", 10000}, {"SET", "K:waiting", "1"}},
				keys: []string{"K", "K:released", "K:queue", "K:waiting"}, args: []any{"me", 10000, 1000}, want: scripts.ReplyOK},
			{name: "ours, announced", setup: [][]any{{"SET", "K", "me", "PX", 10000}}, noPub: true,
				keys: []string{"K", "K:released", "K:queue", "K:waiting"}, args: []any{"me", 10000, 1000, "1"}, want: scripts.ReplyUnpublished},
			{name: "ours, PUBLISH refused", setup: [][]any{{"SET", "K", "me", "PX", 10000}, {"SET", "K:waiting", "1"}}, noPub: true,
				keys: []string{"K", "K:released", "K:queue", "K:waiting"}, args: []any{"me", 10000, 1000}, want: scripts.ReplyUnpublished},
			{name: "ours, nobody waits, PUBLISH refused", setup: [][]any{{"SET", "K", "me", "PX", 10000}}, noPub: true,
				keys: []string{"K", "K:released", "K:queue", "K:waiting"}, args: []any{"me", 10000, 1000}, want: scripts.ReplyOK},
			{name: "already released", setup: [][]any{{"SET", "K:released", "me", "PX", 10000}},
				keys: []string{"K", "K:released", "K:queue", "K:waiting"}, args: []any{"me", 10000, 1000}, want: scripts.ReplyAlready},
			{name: "gone", keys: []string{"K", "K:released", "K:queue", "K:waiting"}, args: []any{"me", 10000, 1000}, want: scripts.ReplyNotOurs},
			{name: "another owner's", setup: [][]any{{"SET", "K", "other", "PX", 10000}},
				keys: []string{"K", "K:released", "K:queue", "K:waiting"}, args: []any{"me", 10000, 1000}, want: scripts.ReplyNotOurs},
			{name: "maxmemory", setup: [][]any{{"SET", "K", "me", "PX", 10000}}, full: true,
				keys: []string{"K", "K:released", "K:queue", "K:waiting"}, args: []any{"me", 10000, 1000}, want: scripts.ReplyOK},
			{name: "maxmemory, waited for", setup: [][]any{{"SET", "K", "me", "PX", 10000}, {"SET", "K:waiting", "1"}}, full: true,
				keys: []string{"K", "K:released", "K:queue", "K:waiting"}, args: []any{"me", 10000, 1000}, want: scripts.ReplyOK},
		}},
		{"retract.lua", scripts.Retract, []scriptCase{
			{name: "ours", setup: [][]any{{"SET", "K", "me", "PX", 10000}},
				keys: []string{"K"}, args: []any{"me"}, want: scripts.ReplyOK},
			{name: "ours, PUBLISH refused", setup: [][]any{{"SET", "K", "me", "PX", 10000}}, noPub: true,
				keys: []string{"K"}, args: []any{"me"}, want: scripts.ReplyUnpublished},
			{name: "gone", keys: []string{"K"}, args: []any{"me"}, want: scripts.ReplyNotOurs},
			{name: "another owner's", setup: [][]any{{"SET", "K", "other", "PX", 10000}},
				keys: []string{"K"}, args: []any{"me"}, want: scripts.ReplyNotOurs},
			{name: "maxmemory", setup: [][]any{{"SET", "K", "me", "PX", 10000}}, full: true,
				keys: []string{"K"}, args: []any{"me"}, want: scripts.ReplyOK},
		}},
		{"repair.lua", scripts.Repair, []scriptCase{
			{name: "free", keys: []string{"K", "K:fence"}, args: []any{"me", 10000, "0", 0}, want: scripts.ReplyOK},
			{name: "free, counter raised", setup: [][]any{{"SET", "K:fence", "5"}},
				keys: []string{"K", "K:fence"}, args: []any{"me", 10000, "7", 60000}, want: scripts.ReplyOK},
			{name: "free, counter not a number", setup: [][]any{{"SET", "K:fence", "x"}},
				keys: []string{"K", "K:fence"}, args: []any{"me", 10000, "7", 60000}, want: scripts.ReplyOK},
			{name: "free, with metadata", keys: []string{"K", "K:fence", "K:meta"}, args: []any{"me", 10000, "0", 0, "me\nm"}, want: scripts.ReplyOK},
			{name: "another owner's", setup: [][]any{{"SET", "K", "other", "PX", 10000}},
				keys: []string{"K", "K:fence"}, args: []any{"me", 10000, "7", 60000}, want: scripts.ReplyTaken},
			{name: "ours already", setup: [][]any{{"SET", "K", "me", "PX", 10000}},
				keys: []string{"K", "K:fence"}, args: []any{"me", 10000, "7", 60000}, want: scripts.ReplyTaken},
			{name: "maxmemory", full: true, keys: []string{"K", "K:fence"}, args: []any{"me", 10000, "7", 60000}, err: "OOM"},
		}},
		{"multi_release.lua", scripts.MultiRelease, []scriptCase{
			{name: "ours", setup: [][]any{{"SET", "K:a", "me"}, {"SET", "K:b", "me"}},
				keys: []string{"K:a", "K:b", "K:a:released", "K:b:released", "K:a:queue", "K:b:queue"}, args: []any{"me", ":rel", 10000, 1000},
				want: scripts.ReplyOK},
			{name: "ours, PUBLISH refused", setup: [][]any{{"SET", "K:a", "me"}, {"SET", "K:b", "me"}}, noPub: true,
				keys: []string{"K:a", "K:b", "K:a:released", "K:b:released", "K:a:queue", "K:b:queue"}, args: []any{"me", ":rel", 10000, 1000},
				want: scripts.ReplyUnpublished},
			{name: "already released", setup: [][]any{{"SET", "K:a:released", "me"}, {"SET", "K:b:released", "me"}},
				keys: []string{"K:a", "K:b", "K:a:released", "K:b:released", "K:a:queue", "K:b:queue"}, args: []any{"me", ":rel", 10000, 1000},
				want: scripts.ReplyAlready},
			{name: "one another owner's", setup: [][]any{{"SET", "K:a", "me"}, {"SET", "K:b", "other"}},
				keys: []string{"K:a", "K:b", "K:a:released", "K:b:released", "K:a:queue", "K:b:queue"}, args: []any{"me", ":rel", 10000, 1000},
				want: scripts.ReplyNotOurs},
		}},
		{"zrelease.lua", scripts.ZRelease, []scriptCase{
			{name: "ours", setup: [][]any{{"ZADD", "K:readers", far, "me"}},
				keys: []string{"K:readers", "K:readers:released:me"}, args: []any{"me", "K:rel", 10000, "1"}, want: scripts.ReplyOK},
			{name: "ours, PUBLISH refused", setup: [][]any{{"ZADD", "K:sem", far, "me"}}, noPub: true,
				keys: []string{"K:sem", "K:sem:released:me", "K:sem:permits"}, args: []any{"me", "K:sem:rel", 10000, "0"},
				want: scripts.ReplyUnpublished},
			{name: "already released", setup: [][]any{{"SET", "K:readers:released:me", "1"}},
				keys: []string{"K:readers", "K:readers:released:me"}, args: []any{"me", "K:rel", 10000, "1"}, want: scripts.ReplyAlready},
			{name: "gone", keys: []string{"K:readers", "K:readers:released:me"}, args: []any{"me", "K:rel", 10000, "1"},
				want: scripts.ReplyNotOurs},
			{name: "lease ended", setup: [][]any{{"ZADD", "K:readers", 1, "me"}},
				keys: []string{"K:readers", "K:readers:released:me"}, args: []any{"me", "K:rel", 10000, "1"}, want: scripts.ReplyNotOurs},
		}},
		{"extend.lua", scripts.Extend, []scriptCase{
			{name: "ours", setup: [][]any{{"SET", "K", "me", "PX", 10000}},
				keys: []string{"K"}, args: []any{"me", 20000, 100}, want: scripts.ReplyOK},
			{name: "gone", keys: []string{"K"}, args: []any{"me", 20000, 100}, want: scripts.ReplyGone},
			{name: "another owner's", setup: [][]any{{"SET", "K", "other", "PX", 10000}},
				keys: []string{"K"}, args: []any{"me", 20000, 100}, want: scripts.ReplyTaken},
			{name: "too near its end", setup: [][]any{{"SET", "K", "me", "PX", 10000}},
				keys: []string{"K"}, args: []any{"me", 20000, 60000}, want: scripts.ReplyLate},
			{name: "another owner's, near its end", setup: [][]any{{"SET", "K", "other", "PX", 10000}},
				keys: []string{"K"}, args: []any{"me", 20000, 60000}, want: scripts.ReplyTaken},
			{name: "ours, no expiry", setup: [][]any{{"SET", "K", "me"}},
				keys: []string{"K"}, args: []any{"me", 20000, 100}, want: scripts.ReplyLate},
			{name: "another type", setup: [][]any{{"ZADD", "K", 1, "me"}, {"PEXPIRE", "K", 10000}},
				keys: []string{"K"}, args: []any{"me", 20000, 100}, err: "WRONGTYPE"},
		}},
		{"multi_extend.lua", scripts.MultiExtend, []scriptCase{
			{name: "ours", setup: [][]any{{"SET", "K:a", "me", "PX", 10000}, {"SET", "K:b", "me", "PX", 10000}},
				keys: []string{"K:a", "K:b"}, args: []any{"me", 20000, 100}, want: scripts.ReplyOK},
			{name: "one gone", setup: [][]any{{"SET", "K:a", "me", "PX", 10000}},
				keys: []string{"K:a", "K:b"}, args: []any{"me", 20000, 100}, want: scripts.ReplyGone},
			{name: "one another owner's", setup: [][]any{{"SET", "K:a", "me", "PX", 10000}, {"SET", "K:b", "other"}},
				keys: []string{"K:a", "K:b"}, args: []any{"me", 20000, 100}, want: scripts.ReplyTaken},
			{name: "one too near its end", setup: [][]any{{"SET", "K:a", "me", "PX", 100000}, {"SET", "K:b", "me", "PX", 10000}},
				keys: []string{"K:a", "K:b"}, args: []any{"me", 20000, 60000}, want: scripts.ReplyLate},
			{name: "one another owner's, live", setup: [][]any{{"SET", "K:a", "me", "PX", 10000}, {"SET", "K:b", "other", "PX", 10000}},
				keys: []string{"K:a", "K:b"}, args: []any{"me", 20000, 100}, want: scripts.ReplyTaken},
			{name: "first another owner's, second gone", setup: [][]any{{"SET", "K:a", "other", "PX", 10000}},
				keys: []string{"K:a", "K:b"}, args: []any{"me", 20000, 100}, want: scripts.ReplyTaken},
			{name: "first gone, second another owner's", setup: [][]any{{"SET", "K:b", "other", "PX", 10000}},
				keys: []string{"K:a", "K:b"}, args: []any{"me", 20000, 100}, want: scripts.ReplyGone},
			{name: "ours, one without expiry", setup: [][]any{{"SET", "K:a", "me", "PX", 10000}, {"SET", "K:b", "me"}},
				keys: []string{"K:a", "K:b"}, args: []any{"me", 20000, 100}, want: scripts.ReplyLate},
			{name: "one another type", setup: [][]any{{"SET", "K:a", "me", "PX", 10000}, {"ZADD", "K:b", 1, "me"}, {"PEXPIRE", "K:b", 10000}},
				keys: []string{"K:a", "K:b"}, args: []any{"me", 20000, 100}, err: "WRONGTYPE"},
		}},
		{"zextend.lua", scripts.ZExtend, []scriptCase{
			{name: "ours", setup: [][]any{{"ZADD", "K:readers", far, "me"}},
				keys: []string{"K:readers"}, args: []any{"me", 20000, 100}, want: scripts.ReplyOK},
			{name: "gone", keys: []string{"K:readers"}, args: []any{"me", 20000, 100}, want: scripts.ReplyGone},
			{name: "lease ended", setup: [][]any{{"ZADD", "K:readers", 1, "me"}},
				keys: []string{"K:readers"}, args: []any{"me", 20000, 100}, want: scripts.ReplyGone},
			{name: "too near its end", setup: [][]any{{"ZADD", "K:readers", far, "me"}},
				keys: []string{"K:readers"}, args: []any{"me", 20000, int64(far) * 10}, want: scripts.ReplyLate},
		}},
		{"pttl.lua", scripts.PTTL, []scriptCase{
			{name: "ours", setup: [][]any{{"SET", "K", "me", "PX", 10000}}, keys: []string{"K"}, args: []any{"me"},
				want: between{1, 10000}},
			{name: "ours without expiry", setup: [][]any{{"SET", "K", "me"}}, keys: []string{"K"}, args: []any{"me"},
				want: -1},
			{name: "gone", keys: []string{"K"}, args: []any{"me"}, want: scripts.ReplyNotOurs},
			{name: "another owner's", setup: [][]any{{"SET", "K", "other"}}, keys: []string{"K"}, args: []any{"me"},
				want: scripts.ReplyOthers},
		}},
		{"multi_pttl.lua", scripts.MultiPTTL, []scriptCase{
			{name: "ours: the shortest", setup: [][]any{{"SET", "K:a", "me", "PX", 100000}, {"SET", "K:b", "me", "PX", 10000}},
				keys: []string{"K:a", "K:b"}, args: []any{"me"}, want: between{1, 10000}},
			{name: "ours without expiry", setup: [][]any{{"SET", "K:a", "me"}, {"SET", "K:b", "me"}},
				keys: []string{"K:a", "K:b"}, args: []any{"me"}, want: -1},
			{name: "one gone", setup: [][]any{{"SET", "K:a", "me"}},
				keys: []string{"K:a", "K:b"}, args: []any{"me"}, want: scripts.ReplyNotOurs},
			{name: "one another owner's", setup: [][]any{{"SET", "K:a", "me"}, {"SET", "K:b", "other"}},
				keys: []string{"K:a", "K:b"}, args: []any{"me"}, want: scripts.ReplyOthers},
		}},
		{"zpttl.lua", scripts.ZPTTL, []scriptCase{
			{name: "ours", setup: [][]any{{"ZADD", "K:readers", far, "me"}}, keys: []string{"K:readers"}, args: []any{"me"},
				want: between{1, far}},
			{name: "gone", keys: []string{"K:readers"}, args: []any{"me"}, want: scripts.ReplyNotOurs},
			{name: "lease ended", setup: [][]any{{"ZADD", "K:readers", 1, "me"}}, keys: []string{"K:readers"},
				args: []any{"me"}, want: scripts.ReplyNotOurs},
		}},
		{"unwait.lua", scripts.Unwait, []scriptCase{
			{name: "queued", setup: [][]any{queuedW},
				keys: []string{"K:queue", "K"}, args: []any{"w", "K:rel", 1000}, want: scripts.ReplyOK},
			{name: "reserved for it", setup: [][]any{{"SET", "K", "queued:w", "PX", 1000}},
				keys: []string{"K:queue", "K"}, args: []any{"w", "K:rel", 1000}, want: scripts.ReplyOK},
		}},
		{"keep.lua", scripts.Keep, []scriptCase{
			{name: "shorter", setup: [][]any{{"SET", "K:fence", "5", "PX", 1000}}, keys: []string{"K:fence"}, args: []any{20000},
				want: 1},
			{name: "longer", setup: [][]any{{"SET", "K:fence", "5", "PX", 60000}}, keys: []string{"K:fence"}, args: []any{20000},
				want: 0},
			{name: "no expiry", setup: [][]any{{"SET", "K:fence", "5"}}, keys: []string{"K:fence"}, args: []any{20000}, want: 0},
			{name: "gone", keys: []string{"K:fence"}, args: []any{20000}, want: 0},
			{name: "this owner's metadata", setup: [][]any{{"SET", "K:meta", "me\nm", "PX", 1000}}, keys: []string{"K:meta"},
				args: []any{20000, "me"}, want: 1},
			{name: "another owner's metadata", setup: [][]any{{"SET", "K:meta", "other\nm", "PX", 1000}}, keys: []string{"K:meta"},
				args: []any{20000, "me"}, want: 0},
		}},
		{"raise.lua", scripts.Raise, []scriptCase{
			{name: "no counter", keys: []string{"K:fence"}, args: []any{"7"}, want: 7},
			{name: "lower counter", setup: [][]any{{"SET", "K:fence", "5"}}, keys: []string{"K:fence"}, args: []any{"7"},
				want: 7},
			{name: "higher counter", setup: [][]any{{"SET", "K:fence", "10"}}, keys: []string{"K:fence"}, args: []any{"7"},
				want: 10},
		}},
		{"inspect.lua", scripts.Inspect, []scriptCase{
			{name: "free", keys: []string{"K", "K:fence", "K:meta", "K:readers"},
				want: []any{"", -2, "", "", 0, 0}},
			{name: "held", setup: [][]any{{"SET", "K", "me", "PX", 10000}, {"SET", "K:fence", "5"}, {"SET", "K:meta", "me\nhost a"}},
				keys: []string{"K", "K:fence", "K:meta", "K:readers"},
				want: []any{"me", between{1, 10000}, "5", "host a", 0, 0}},
			{name: "read holds", setup: [][]any{{"ZADD", "K:readers", far, "r1"}, {"ZADD", "K:readers", far, "r2"}},
				keys: []string{"K", "K:fence", "K:meta", "K:readers"},
				want: []any{"", -2, "", "", 2, between{1, far}}},
		}},
		{"proclaim.lua", scripts.Proclaim, []scriptCase{
			{name: "ours", setup: [][]any{{"SET", "K", "me", "PX", 10000}, {"SET", "K:meta", "me\nold", "PX", 10000}},
				keys: []string{"K", "K:meta"}, args: []any{"me", "1", "new", "K:elect", "5\nnew"}, want: scripts.ReplyOK},
			{name: "ours, no metadata", setup: [][]any{{"SET", "K", "me", "PX", 10000}},
				keys: []string{"K", "K:meta"}, args: []any{"me", "0", "", "K:elect", "5\n"}, want: scripts.ReplyOK},
			{name: "ours, PUBLISH refused", setup: [][]any{{"SET", "K", "me", "PX", 10000}}, noPub: true,
				keys: []string{"K", "K:meta"}, args: []any{"me", "1", "new", "K:elect", "5\nnew"}, want: scripts.ReplyUnpublished},
			{name: "another owner's", setup: [][]any{{"SET", "K", "other", "PX", 10000}},
				keys: []string{"K", "K:meta"}, args: []any{"me", "1", "new", "K:elect", "5\nnew"}, want: scripts.ReplyNotOurs},
			{name: "gone", keys: []string{"K", "K:meta"}, args: []any{"me", "1", "new", "K:elect", "5\nnew"}, want: scripts.ReplyNotOurs},
		}},
		{"fence_admit.lua", fenceAdmitScript, []scriptCase{
			{name: "first", keys: []string{"K:mark"}, args: []any{"5"}, want: []any{scripts.ReplyOK}},
			{name: "equal", setup: [][]any{{"SET", "K:mark", "5"}}, keys: []string{"K:mark"}, args: []any{"5"},
				want: []any{scripts.ReplyOK}},
			{name: "higher", setup: [][]any{{"SET", "K:mark", "5"}}, keys: []string{"K:mark"}, args: []any{"6"},
				want: []any{scripts.ReplyOK}},
			{name: "stale", setup: [][]any{{"SET", "K:mark", "5"}}, keys: []string{"K:mark"}, args: []any{"4"},
				want: []any{scripts.ReplyStale, "5"}},
			{name: "invalid token", keys: []string{"K:mark"}, args: []any{"0"}, err: "invalid token"},
			{name: "corrupt mark", setup: [][]any{{"SET", "K:mark", "x"}}, keys: []string{"K:mark"}, args: []any{"5"},
				err: "does not hold an integer"},
		}},
		{"fence_set.lua", fenceSetScript, []scriptCase{
			{name: "admitted", setup: [][]any{{"SET", "K:mark", "5"}}, keys: []string{"K:mark", "K"}, args: []any{"5", "v", 0},
				want: []any{scripts.ReplyOK}},
			{name: "stale", setup: [][]any{{"SET", "K:mark", "5"}}, keys: []string{"K:mark", "K"}, args: []any{"4", "v", 0},
				want: []any{scripts.ReplyStale, "5"}},
			{name: "invalid token", keys: []string{"K:mark", "K"}, args: []any{"x", "v", 0}, err: "invalid token"},
		}},
		{"fence_del.lua", fenceDelScript, []scriptCase{
			{name: "admitted", setup: [][]any{{"SET", "K", "v"}}, keys: []string{"K:mark", "K"}, args: []any{"5"},
				want: []any{scripts.ReplyOK}},
			{name: "stale", setup: [][]any{{"SET", "K:mark", "5"}}, keys: []string{"K:mark", "K"}, args: []any{"4"},
				want: []any{scripts.ReplyStale, "5"}},
			{name: "corrupt mark", setup: [][]any{{"SET", "K:mark", "x"}}, keys: []string{"K:mark", "K"}, args: []any{"5"},
				err: "does not hold an integer"},
		}},
		{"fence_hset.lua", fenceHSetScript, []scriptCase{
			{name: "admitted", keys: []string{"K:mark", "K"}, args: []any{"5", "f", "v"}, want: []any{scripts.ReplyOK}},
			{name: "stale", setup: [][]any{{"SET", "K:mark", "5"}}, keys: []string{"K:mark", "K"}, args: []any{"4", "f", "v"},
				want: []any{scripts.ReplyStale, "5"}},
			{name: "not a hash", setup: [][]any{{"SET", "K", "v"}}, keys: []string{"K:mark", "K"}, args: []any{"5", "f", "v"},
				err: "WRONGTYPE"},
		}},
	}

	// Every script file has its cases.
	files, err := fs.Glob(scripts.FS, "*.lua")
	if err != nil {
		t.Fatal(err)
	}
	tested := make(map[string]bool)
	for _, s := range table {
		tested[s.file] = true
	}
	for _, f := range files {
		if f := path.Base(f); f != "_lib.lua" && !tested[f] {
			t.Errorf("%s has no cases in TestScripts", f)
		}
	}

	for _, s := range table {
		t.Run(s.file, func(t *testing.T) {
			for i, tc := range s.cases {
				t.Run(tc.name, func(t *testing.T) {
					for _, flushed := range []bool{true, false} {
						tag := fmt.Sprintf("{scripts:%s:%d:%t}", s.file, i, flushed)
						if flushed {
							srv.Do(t, "SCRIPT", "FLUSH")
						}
						got, err := runCase(t, srv, cl, nopub, s.script, tag, tc)
						switch {
						case tc.err != "":
							if err == nil || !strings.Contains(err.Error(), tc.err) {
								t.Errorf("flushed=%t: Run() = %v, %v, want an error with %q", flushed, got, err, tc.err)
							}
						case err != nil:
							t.Errorf("flushed=%t: Run() = %v", flushed, err)
						case !replyMatches(got, tc.want):
							t.Errorf("flushed=%t: Run() = %v, want %v", flushed, got, tc.want)
						}
					}
				})
			}
		})
	}
}

// runCase sets up tc on the keys of tag and runs script once.
func runCase(t *testing.T, srv *redistest.Server, cl, nopub *redis.Client, script *redis.Script, tag string, tc scriptCase) (any, error) {
	t.Helper()
	ctx := context.Background()
	at := func(v any) any {
		if s, ok := v.(string); ok && (s == "K" || strings.HasPrefix(s, "K:")) {
			return tag + s[1:]
		}
		return v
	}
	for _, cmd := range tc.setup {
		args := make([]any, len(cmd))
		for i, a := range cmd {
			args[i] = at(a)
		}
		srv.Do(t, args...)
	}
	keys := make([]string, len(tc.keys))
	for i, k := range tc.keys {
		keys[i] = at(k).(string)
	}
	args := make([]any, len(tc.args))
	for i, a := range tc.args {
		args[i] = at(a)
	}
	if tc.full {
		unfill := fillMemory(t, srv)
		defer unfill()
	}
	c := cl
	if tc.noPub {
		c = nopub
	}
	return script.Run(ctx, c, keys, args...).Result()
}

// replyMatches reports whether a script's reply got is want: an int
// (compared as int64), a string, a between, or a list of those.
func replyMatches(got, want any) bool {
	switch w := want.(type) {
	case int:
		return got == int64(w)
	case between:
		v, ok := got.(int64)
		return ok && v >= w.lo && v <= w.hi
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !replyMatches(g[i], w[i]) {
				return false
			}
		}
		return true
	}
	return got == want
}

// TestExtendScriptTracking: extend.lua (and multi_extend.lua, below) on a
// connection with CLIENT TRACKING (default mode, REDIRECT, NOLOOP, as the
// data connection runs it) keeps the key armed, and tells nothing of its own move: after the renewal an
// outside change of another armed key is the next message, and an outside
// change of the renewed key the one after. A lease that turns out to be
// another owner's (or a key of another type) keeps the expiry it had (later
// by the time the script ran, bounded here by a second, which a missing move
// back exceeds 50 times over); one of 2^53 ms or more, and any when the
// server refuses writes, is not touched at all, and the refusal is the
// reply for our own key.
func TestExtendScriptTracking(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	out := srv.Client(t)
	ctx := context.Background()

	opts := &redis.Options{Addr: srv.Addr(), Protocol: 2, PoolSize: 1, ClientName: "extend-listener"}
	listener := redis.NewClient(opts)
	t.Cleanup(func() { listener.Close() })
	ps := listener.Subscribe(ctx, "__redis__:invalidate")
	t.Cleanup(func() { ps.Close() })
	_, err := ps.Receive(ctx)
	require.NoError(t, err)
	var id int64
	for l := range strings.Lines(out.ClientList(ctx).Val()) {
		if strings.Contains(l, " name=extend-listener ") {
			_, err := fmt.Sscanf(l, "id=%d ", &id)
			require.NoError(t, err)
		}
	}
	require.NotZero(t, id, "the listener's client id")
	data := redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: 2, PoolSize: 1})
	t.Cleanup(func() { data.Close() })
	conn := data.Conn()
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, conn.Do(ctx, "CLIENT", "TRACKING", "on", "REDIRECT", id, "NOLOOP").Err())

	msgs := ps.Channel()
	next := func() []string {
		t.Helper()
		select {
		case m := <-msgs:
			return m.PayloadSlice
		case <-time.After(5 * time.Second):
			t.Fatal("no invalidation within 5 s")
			return nil
		}
	}
	require.NoError(t, out.Set(ctx, "K", "me", time.Minute).Err())
	require.NoError(t, out.Set(ctx, "M", "x", time.Minute).Err())
	require.NoError(t, conn.Get(ctx, "K").Err())
	require.NoError(t, conn.Get(ctx, "M").Err())
	for range 3 {
		code, err := scripts.Extend.Run(ctx, conn, []string{"K"}, "me", 20000, 100).Int()
		require.NoError(t, err)
		require.Equal(t, int(scripts.ReplyOK), code)
	}
	require.NoError(t, out.Set(ctx, "M", "y", time.Minute).Err())
	assert.Equal(t, []string{"M"}, next(), "the renewals were told to the listener")
	require.NoError(t, out.Set(ctx, "K", "someone-else", time.Minute).Err())
	assert.Equal(t, []string{"K"}, next(), "the renewed key is no longer armed")

	for _, key := range []string{"other", "zset"} {
		if key == "zset" {
			require.NoError(t, out.ZAdd(ctx, key, redis.Z{Score: 1, Member: "me"}).Err())
			require.NoError(t, out.PExpire(ctx, key, time.Minute).Err())
		} else {
			require.NoError(t, out.Set(ctx, key, "someone-else", time.Minute).Err())
		}
		before, err := out.Do(ctx, "PEXPIRETIME", key).Int64()
		require.NoError(t, err)
		code, err := scripts.Extend.Run(ctx, out, []string{key}, "me", 60000, 100).Int()
		if key == "zset" {
			require.ErrorContains(t, err, "WRONGTYPE")
		} else {
			require.NoError(t, err)
			assert.Equal(t, int(scripts.ReplyTaken), code)
		}
		after, err := out.Do(ctx, "PEXPIRETIME", key).Int64()
		require.NoError(t, err)
		assert.GreaterOrEqual(t, after, before, "%s: expiry moved earlier", key)
		assert.LessOrEqual(t, after, before+1000, "%s: expiry moved later", key)
	}

	pexpiretime := func(key string) int64 {
		t.Helper()
		v, err := out.Do(ctx, "PEXPIRETIME", key).Int64()
		require.NoError(t, err)
		return v
	}

	// multi_extend.lua likewise: after a renewal both keys are armed; when
	// its third key turns out to be another owner's, every key goes back,
	// nothing is told, and ours stay armed. (On Redis 7.0 any read in a
	// script tracks every key the script declares, so this cannot tell
	// which read re-armed which key; a server that tracks per command can.)
	for _, k := range []string{"A", "B", "C", "N"} {
		require.NoError(t, out.Set(ctx, k, "me", time.Minute).Err())
		require.NoError(t, conn.Get(ctx, k).Err())
	}
	code, err := scripts.MultiExtend.Run(ctx, conn, []string{"A", "B"}, "me", 20000, 100).Int()
	require.NoError(t, err)
	require.Equal(t, int(scripts.ReplyOK), code)
	for _, k := range []string{"A", "B"} {
		require.NoError(t, out.Set(ctx, k, "someone-else", time.Minute).Err())
		assert.Equal(t, []string{k}, next(), "the multi renewal was told, or %s is not armed", k)
		require.NoError(t, out.Set(ctx, k, "me", time.Minute).Err())
		require.NoError(t, conn.Get(ctx, k).Err())
	}
	require.NoError(t, out.Set(ctx, "C", "someone-else", time.Minute).Err())
	assert.Equal(t, []string{"C"}, next())
	before := map[string]int64{"A": pexpiretime("A"), "B": pexpiretime("B"), "C": pexpiretime("C")}
	code, err = scripts.MultiExtend.Run(ctx, conn, []string{"A", "B", "C"}, "me", 60000, 100).Int()
	require.NoError(t, err)
	assert.Equal(t, int(scripts.ReplyTaken), code)
	for k, was := range before {
		assert.GreaterOrEqual(t, pexpiretime(k), was, "%s moved earlier", k)
		assert.LessOrEqual(t, pexpiretime(k), was+1000, "%s not moved back", k)
	}
	require.NoError(t, out.Set(ctx, "N", "x", time.Minute).Err())
	assert.Equal(t, []string{"N"}, next(), "the multi renewal that found C taken was told")
	for _, k := range []string{"A", "B"} {
		require.NoError(t, out.Set(ctx, k, "someone-else", time.Minute).Err())
		assert.Equal(t, []string{k}, next(), "%s is not armed after the move back", k)
	}

	// A lease beyond 2^53 ms: Lua could not give its length back exactly
	// (and Redis 7.0 writes 2e17 as "2e+17", which PEXPIRE refuses).
	far := time.Now().UnixMilli() + 2e17
	require.NoError(t, out.Set(ctx, "far", "someone-else", 0).Err())
	require.NoError(t, out.Do(ctx, "PEXPIREAT", "far", far).Err())
	code, err = scripts.Extend.Run(ctx, out, []string{"far"}, "me", 60000, 100).Int()
	require.NoError(t, err)
	assert.Equal(t, int(scripts.ReplyTaken), code)
	assert.Equal(t, far, pexpiretime("far"), "a far expiry moved")
	require.NoError(t, out.Set(ctx, "near", "me", time.Minute).Err())
	nearWas := pexpiretime("near")
	code, err = scripts.MultiExtend.Run(ctx, out, []string{"near", "far"}, "me", 60000, 100).Int()
	require.NoError(t, err)
	assert.Equal(t, int(scripts.ReplyTaken), code)
	assert.Equal(t, far, pexpiretime("far"), "a far expiry moved by multi_extend.lua")
	assert.Equal(t, nearWas, pexpiretime("near"), "our key moved though another was far")

	// Writes refused (no replica for min-replicas-to-write): another
	// owner's key is taken and untouched, ours gets the refusal.
	require.NoError(t, out.Set(ctx, "theirs", "someone-else", time.Minute).Err())
	require.NoError(t, out.Set(ctx, "ours", "me", time.Minute).Err())
	require.NoError(t, out.Set(ctx, "ours2", "me", time.Minute).Err())
	theirs, ours, ours2 := pexpiretime("theirs"), pexpiretime("ours"), pexpiretime("ours2")
	require.NoError(t, out.ConfigSet(ctx, "min-replicas-to-write", "1").Err())
	code, err = scripts.Extend.Run(ctx, out, []string{"theirs"}, "me", 60000, 100).Int()
	require.NoError(t, err)
	assert.Equal(t, int(scripts.ReplyTaken), code)
	_, err = scripts.Extend.Run(ctx, out, []string{"ours"}, "me", 60000, 100).Int()
	assert.ErrorContains(t, err, "NOREPLICAS")
	code, err = scripts.MultiExtend.Run(ctx, out, []string{"ours", "theirs"}, "me", 60000, 100).Int()
	require.NoError(t, err)
	assert.Equal(t, int(scripts.ReplyTaken), code)
	_, err = scripts.MultiExtend.Run(ctx, out, []string{"ours", "ours2"}, "me", 60000, 100).Int()
	assert.ErrorContains(t, err, "NOREPLICAS")
	require.NoError(t, out.ConfigSet(ctx, "min-replicas-to-write", "0").Err())
	assert.Equal(t, theirs, pexpiretime("theirs"), "their expiry moved while writes were refused")
	assert.Equal(t, ours, pexpiretime("ours"), "our expiry moved while writes were refused")
	assert.Equal(t, ours2, pexpiretime("ours2"), "our expiry moved while writes were refused")
}
