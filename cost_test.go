package redlock

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/internal/scripts"
)

// pairCommandBudget is what an uncontended TryLock+Unlock with fencing on
// may cost the server, counting the commands the scripts run (INFO
// commandstats): bsm/redislock's Obtain+Release runs 5.
const pairCommandBudget = 7

// TestPairCommandBudget counts the server commands of uncontended
// TryLock+Unlock pairs, on free names never used before (a fresh fence
// counter each) and on one name used again and again, and fails above the
// budget, so that no change adds a command to the hot path silently.
func TestPairCommandBudget(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t), WithAutoRenew(false))
	ctx := context.Background()
	const pairs = 100
	for _, tc := range []struct {
		name string
		lock func(i int) string
	}{
		{"fresh names", func(i int) string { return fmt.Sprintf("fresh-%d", i) }},
		{"one name", func(int) string { return "again" }},
	} {
		// Warm the name's keys up for the second case.
		l, err := lk.TryLock(ctx, tc.lock(-1))
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
		srv.Do(t, "CONFIG", "RESETSTAT")
		for i := range pairs {
			l, err := lk.TryLock(ctx, tc.lock(i))
			require.NoError(t, err)
			require.Positive(t, l.Token())
			require.NoError(t, l.Unlock(ctx))
		}
		calls := withoutSetUp(allCalls(t, srv))
		total := 0
		var each []string
		for cmd, n := range calls {
			switch cmd {
			case "config|resetstat", "info":
				continue // the test's own
			}
			total += n
			each = append(each, fmt.Sprintf("%s=%.2f", cmd, float64(n)/pairs))
		}
		sort.Strings(each)
		t.Logf("%s: %.2f commands per pair: %s", tc.name, float64(total)/pairs, strings.Join(each, " "))
		assert.LessOrEqual(t, float64(total)/pairs, float64(pairCommandBudget), "%s: server commands per uncontended pair (%s)", tc.name, strings.Join(each, " "))
	}
}

// withoutSetUp is calls (INFO commandstats) without what connections made
// on the way cost: each connection's HELLO, CLIENT SETINFO and SETNAME,
// the pool's PING of an idle one, a tracking data connection's CLIENT
// TRACKING, and a tracking listener's CLIENT ID with the SUBSCRIBE that
// follows it. A loaded machine makes the library reconnect a tracking
// connection now and then, which is no command of a lock's.
func withoutSetUp(calls map[string]int) map[string]int {
	calls["subscribe"] -= min(calls["subscribe"], calls["client|id"])
	for _, cmd := range []string{"hello", "client|setinfo", "client|setname", "ping", "client|tracking", "client|id"} {
		delete(calls, cmd)
	}
	if calls["subscribe"] == 0 {
		delete(calls, "subscribe")
	}
	return calls
}

// handOffCommandBudget is the most server commands (scripts and the
// commands they call) that one hand-off between two processes may cost: the
// waiter's refused attempt that queues it, the holder's release that
// reserves the name for it and publishes, and the waiter's attempt that
// takes it, three EVALSHA in all. 26 before the refused attempt read the
// holder with its SET NX and a new queue entry took one ZADD.
const handOffCommandBudget = 23

// TestHandOffCommandBudget counts the server commands of hand-offs of one
// name between two Lockers (two processes, as far as the server can tell),
// each waiting in Lock while the other holds it, and fails above the
// budget: the cross-process queue's path, as TestPairCommandBudget is the
// uncontended one's.
func TestHandOffCommandBudget(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// Without loss tracking: a loaded machine holds a lock 50ms before its
	// Unlock now and then, and the tracking connection's first read of it
	// (pttl.lua, one EVALSHA and a GET) is not the hand-off's.
	lks := twoLockers(t, srv, WithAutoRenew(false), WithTTL(30*time.Second), WithRetry(ConstantRetry(time.Hour)), WithLossTracking(false))
	admin := srv.Client(t)
	ctx := context.Background()
	const name, rounds = "relay", 20
	queue := rlKey(name) + ":queue"
	channel := engine.ReleaseChannel(engine.LockKey("redlock:", name))
	held, err := lks[0].Lock(ctx, name)
	require.NoError(t, err)
	// One round hands the name from holder to waiter; the first one also
	// subscribes the waiter's Locker, so counting starts after two.
	handOff := func(i int) {
		w := lks[(i+1)%2]
		got := make(chan *Lock, 1)
		go func() {
			l, err := w.Lock(ctx, name)
			assert.NoError(t, err)
			got <- l
		}()
		// The waiter's refused attempt queued it (TYPE: no script uses it),
		// and its Locker listens for the release: a message sent before
		// its SUBSCRIBE ran would reach nobody, and the waiter (hour-long
		// retry) would sleep out the lease.
		require.True(t, eventually(10*time.Second, func() bool {
			return admin.Type(ctx, queue).Val() == "zset" && w.c.Waits.PS.Listening(channel)
		}), "round %d: the waiter queued and listening", i)
		require.NoError(t, held.Unlock(ctx))
		select {
		case held = <-got:
			require.NotNil(t, held)
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the waiter did not get the lock", i)
		}
	}
	handOff(0)
	handOff(1)
	srv.Do(t, "CONFIG", "RESETSTAT")
	for i := range rounds {
		handOff(i)
	}
	calls := withoutSetUp(allCalls(t, srv))
	total := 0
	var each []string
	for cmd, n := range calls {
		switch cmd {
		case "config|resetstat", "info", "type":
			continue // the test's own
		}
		total += n
		each = append(each, fmt.Sprintf("%s=%.2f", cmd, float64(n)/rounds))
	}
	sort.Strings(each)
	t.Logf("%.2f commands per hand-off: %s", float64(total)/rounds, strings.Join(each, " "))
	assert.Equal(t, 3*rounds, calls["evalsha"], "scripts: a refused attempt, a release, a claim per hand-off")
	assert.LessOrEqual(t, float64(total)/rounds, float64(handOffCommandBudget), "server commands per hand-off (%s)", strings.Join(each, " "))
	require.NoError(t, held.Unlock(ctx))
}

// TestReleasePublishesOnlyWhenWaited: a release publishes its message only
// when a refused caller marked the name waited for; then the message is
// what wakes it. Waiters of the holder's own Locker, which never ask the
// server while it holds the name, are woken in process. Every waiter here
// has a retry policy of an hour, and the holder a lease of 30 s, so a
// waiter that got the lock within 10 s was woken by the release.
func TestReleasePublishesOnlyWhenWaited(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	opts := []Option{WithTTL(30 * time.Second), WithRetry(ConstantRetry(time.Hour))}
	lks := twoLockers(t, srv, opts...)

	publishes := commandCalls(t, srv, "publish")
	for range 20 {
		l, err := lks[0].TryLock(ctx, "quiet")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	assert.Equal(t, publishes, commandCalls(t, srv, "publish"), "PUBLISH calls for releases nobody waited for")

	for _, tc := range []struct {
		name  string
		other int // the Locker of the waiter: 1 another, 0 the holder's own
		read  bool
	}{
		{"writer of another Locker", 1, false},
		{"reader of another Locker", 1, true},
		{"writer of the same Locker", 0, false},
		{"reader of the same Locker", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "waited-" + strings.ReplaceAll(tc.name, " ", "-")
			holder, err := lks[0].TryLock(ctx, name)
			require.NoError(t, err)
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			got := make(chan error, 1)
			w := lks[tc.other]
			go func() {
				var l *Lock
				var err error
				if tc.read {
					l, err = w.RLock(wctx, name)
				} else {
					l, err = w.Lock(wctx, name)
				}
				if err == nil {
					err = l.Unlock(ctx)
				}
				got <- err
			}()
			if tc.other == 1 {
				require.True(t, eventually(5*time.Second, func() bool {
					return get(t, srv.Client(t), "{redlock:"+name+"}:waiting") == "1"
				}), "the refused waiter marked the name")
				// Subscribed after its refusal: a release before that would
				// go unheard, marked or not, and the hour's policy would keep
				// the waiter asleep until the lease ends.
				waitSubscribers(t, srv, "{redlock:"+name+"}:rel", 1)
			} else {
				qk := engine.ReleaseChannel(engine.LockKey("redlock:", name))
				if tc.read {
					qk = engine.QueueKey(qk, engine.QueueReaders)
				}
				require.True(t, eventually(5*time.Second, func() bool { return lks[0].c.Waits.Busy(qk) }), "the waiter queued")
			}
			before := commandCalls(t, srv, "publish")
			require.NoError(t, holder.Unlock(ctx))
			require.NoError(t, <-got, "the waiter got the name after the release")
			if tc.other == 1 {
				assert.Positive(t, commandCalls(t, srv, "publish")-before, "the release was published")
			}
		})
	}
}

// TestReadMarkFollowsHolds: the lock key's mark of live read holds, which
// refuses writers without a read of the holds, lives as long as the
// longest of them through renewals, goes with the last release, and
// shortens to the holds left when a longer one is released.
func TestReadMarkFollowsHolds(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	lk := newLocker(t, srv.Client(t), WithTTL(300*time.Millisecond))
	key := "{redlock:marked}"

	short, err := lk.TryRLock(ctx, "marked")
	require.NoError(t, err)
	long, err := lk.TryRLock(ctx, "marked", WithTTL(time.Minute), WithAutoRenew(false))
	require.NoError(t, err)
	assert.Equal(t, scripts.ReadMark, get(t, admin, key), "the lock key while read holds are live")
	_, err = lk.TryLock(ctx, "marked")
	require.ErrorIs(t, err, ErrNotObtained)
	require.NoError(t, long.Unlock(ctx))
	assert.LessOrEqual(t, admin.PTTL(ctx, key).Val(), 300*time.Millisecond, "the mark after the longest hold left")

	// Renewed past three of its TTLs, the short hold keeps writers out.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		_, err = lk.TryLock(ctx, "marked")
		require.ErrorIs(t, err, ErrNotObtained, "a writer while a renewed read hold is live")
		require.NoError(t, short.Err())
		time.Sleep(50 * time.Millisecond) // pacing the probes, not synchronisation
	}
	require.NoError(t, short.Unlock(ctx))
	assert.Empty(t, get(t, admin, key), "the mark after the last hold left")
	w, err := lk.TryLock(ctx, "marked")
	require.NoError(t, err, "a writer once the read holds are gone")
	require.NoError(t, w.Unlock(ctx))
}

// TestRedlockPairScripts: a healthy Redlock of five sends each master one
// acquire and one release per uncontended TryLock+Unlock, stragglers
// included: TryLock returns at a quorum, and where the acquire has not
// answered when Unlock runs, the acquire's own call releases its grant once
// it answers. Before, Unlock released there too, and so each straggler's
// grant was released twice: 11.2-11.5 scripts per pair. No key is left.
func TestRedlockPairScripts(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 5)
	clients := make([]Client, len(servers))
	for i, srv := range servers {
		clients[i] = goRedisDefaults(t, srv.Addr())
	}
	r, err := NewRedlock(clients, WithAutoRenew(false))
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	ctx := context.Background()
	l, err := r.TryLock(ctx, "pairs-warm") // connections, scripts
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	for _, srv := range servers {
		srv.Do(t, "CONFIG", "RESETSTAT")
	}
	const pairs = 200
	for i := range pairs {
		l, err := r.TryLock(ctx, fmt.Sprintf("pairs-%d", i))
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	keys := make([]string, pairs)
	for i := range keys {
		keys[i] = rlKey(fmt.Sprintf("pairs-%d", i))
	}
	admins := make([]*redis.Client, len(servers))
	for i, srv := range servers {
		admins[i] = srv.Client(t)
	}
	left := func() (n int64) {
		for _, a := range admins {
			n += a.Exists(ctx, keys...).Val()
		}
		return n
	}
	// Every straggler has answered and been dealt with once no key is left.
	require.Eventually(t, func() bool { return left() == 0 }, 5*time.Second, time.Millisecond, "lock keys left")
	scripts := 0
	for _, srv := range servers {
		scripts += allCalls(t, srv)["evalsha"]
	}
	t.Logf("%.2f scripts per pair over five masters", float64(scripts)/pairs)
	assert.LessOrEqual(t, float64(scripts)/pairs, 10.25, "scripts per pair: one acquire and one release per master")
}

// TestCommonPathDefinesLittle: the assembled acquire and release scripts
// make no closure on an uncontended pair's path: mint's common case is
// written out in acquire.lua, and every function of _lib.lua is defined
// after the line the common path returns before (luasrc.Marker). A
// function a script defines is made on every run that reaches it;
// measured, leaving out the 14 of _lib.lua was about 5% of the server's
// instructions per pair, and writing out mint's 4 another 4%
// (BENCHMARKS.md).
func TestCommonPathDefinesLittle(t *testing.T) {
	t.Parallel()
	def := regexp.MustCompile(`(?m)^local function (\w+)\(`)
	for _, tc := range []struct {
		s     *redis.Script
		start string   // where the common path starts: its block ends at the next "end" line
		want  []string // the functions defined before that block ends
	}{
		{scripts.Acquire, "local cur = redis.call('SET', KEYS[1]", nil},
		{scripts.Release, "local v = redis.call('MGET', KEYS[1], KEYS[4])", nil},
	} {
		body := scripts.Sources[tc.s].Body
		start := strings.Index(body, tc.start)
		require.Positive(t, start, "%q in the assembled script", tc.start)
		end := start + strings.Index(body[start:], "\nend\n")
		require.Greater(t, end, start, "the common path's block")
		var defined []string
		for _, m := range def.FindAllStringSubmatchIndex(body, -1) {
			if m[0] < end {
				defined = append(defined, body[m[2]:m[3]])
			}
		}
		assert.Equal(t, tc.want, defined, "functions defined before the common path returns")
		assert.Contains(t, body[start:end], "return", "the common path returns in its block")
	}
}
