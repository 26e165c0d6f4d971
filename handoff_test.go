package redlock

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/internal/scripts"
)

// TestHandOffInProcess: an Unlock with a goroutine of the same Locker
// waiting passes the lock in one script: no PUBLISH, no acquire by the
// waiter, a fresh owner and a larger token, and the waiter's own options.
func TestHandOffInProcess(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	// Without the tracking connection: it opens once a lock has been held
	// 50ms, which a loaded machine reaches between the TryLock and the
	// Unlock below, and its first read of the held lock is a script too.
	lk := newLocker(t, srv.Client(t), WithRetry(ConstantRetry(time.Hour)), WithLossTracking(false))
	ctx := context.Background()
	for i := range 5 {
		holder, err := lk.TryLock(ctx, "handoff")
		require.NoError(t, err)
		waiter := waitBehind(t, lk, "handoff", WithTTL(3*time.Second), WithAutoRenew(false))
		// The waiter makes no attempt (its own Locker holds the name), but
		// its SUBSCRIBE goes out from another goroutine after it queued: once
		// the server has it, only the hand-off may run.
		waitSubscribers(t, srv, rlKey("handoff")+scripts.ChannelSuffix, 1)
		before := allCalls(t, srv)
		unlocked := time.Now()
		require.NoError(t, holder.Unlock(ctx))
		w := waiter()
		after := allCalls(t, srv)
		ran := func(cmd string) int { return after[cmd] - before[cmd] }
		assert.Equal(t, 0, ran("publish"), "round %d: a hand-off publishes nothing", i)
		assert.Equal(t, 1, ran("evalsha"), "round %d: one script for release and grant", i)
		assert.Equal(t, 0, ran("time"), "round %d: the token's floor is the client's clock", i)
		total, each := commandsRan(before, after)
		assert.LessOrEqual(t, total, 6, "round %d: server commands of a hand-off in process:%s", i, each)
		assert.Greater(t, w.Token(), holder.Token())
		assert.NotEqual(t, holder.Owner(), w.Owner())
		assert.Equal(t, w.Owner(), get(t, admin, "{redlock:handoff}"))
		pttl := admin.PTTL(ctx, "{redlock:handoff}").Val()
		assert.Greater(t, pttl, 2*time.Second, "the waiter's own TTL")
		assert.True(t, w.Until().After(unlocked.Add(2*time.Second)), "validity from the Unlock's send")
		assert.ErrorIs(t, holder.Err(), ErrReleased)
		require.NoError(t, w.Unlock(ctx))
	}
}

// commandsRan is the number of server commands run between two allCalls
// snapshots, and each command's count, leaving out the snapshots' own INFO
// and a new connection's set-up.
func commandsRan(before, after map[string]int) (total int, each string) {
	cmds := slices.Sorted(maps.Keys(after))
	for _, cmd := range cmds {
		switch cmd {
		case "info", "hello", "client|setinfo", "ping":
			continue
		}
		if n := after[cmd] - before[cmd]; n > 0 {
			total += n
			each += fmt.Sprintf(" %s=%d", cmd, n)
		}
	}
	return total, each
}

// TestHandOffRacesWaiterLeaving: waiters whose ctx ends while Unlocks hand
// them the lock leave nothing behind: every hand-off either reaches a waiter
// that then owns the lock, or is released.
func TestHandOffRacesWaiterLeaving(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	lk := newLocker(t, srv.Client(t), WithTTL(5*time.Second))
	ctx := context.Background()
	var mu sync.Mutex
	got := 0
	for i := range 100 {
		// Lock, not TryLock: a waiter whose ctx ended while its own acquire
		// was on the wire releases that late grant from a goroutine of the
		// Locker, possibly just after the round ended.
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		holder, err := lk.Lock(hctx, "race")
		cancel()
		require.NoError(t, err)
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				wctx, cancel := context.WithTimeout(ctx, time.Duration(rand.IntN(3000))*time.Microsecond)
				defer cancel()
				if w, err := lk.Lock(wctx, "race"); err == nil {
					mu.Lock()
					got++
					mu.Unlock()
					assert.NoError(t, w.Unlock(ctx))
				}
			})
		}
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // vary where the Unlock falls among the waiters' deadlines
		assert.NoError(t, holder.Unlock(ctx), "round %d", i)
		wg.Wait()
	}
	assert.True(t, eventually(2*time.Second, func() bool { return admin.Exists(ctx, "{redlock:race}").Val() == 0 }),
		"a lock handed to a waiter that had left is still held (owner %q)", get(t, admin, "{redlock:race}"))
	t.Logf("%d of 300 waiters got the lock", got)
}

// TestHandOffMintForms: a hand-off mints the waiter's token with the floor
// its client sends, in the form an acquire sends it (the floor alone for
// the default retention, "<retention>:<floor>" otherwise), and keeps the
// counter for the waiter's retention: a form read as another would give
// the counter the default's life, or no floor.
func TestHandOffMintForms(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	for _, retention := range []time.Duration{scripts.DefaultFenceRetention, 2 * time.Hour} {
		name := fmt.Sprintf("forms-%d", retention.Milliseconds())
		fence := rlKey(name) + ":fence"
		lk := newLocker(t, srv.Client(t), WithFenceRetention(retention), WithRetry(ConstantRetry(time.Hour)), WithLossTracking(false))
		holder, err := lk.TryLock(ctx, name)
		require.NoError(t, err)
		waiter := waitBehind(t, lk, name, WithAutoRenew(false))
		unlocked := time.Now()
		require.NoError(t, holder.Unlock(ctx))
		w := waiter()
		counter, err := admin.Get(ctx, fence).Int64()
		require.NoError(t, err)
		assert.Equal(t, counter, w.Token(), "%v: the counter holds the waiter's token", retention)
		assert.Greater(t, w.Token(), holder.Token(), "%v", retention)
		assert.GreaterOrEqual(t, w.Token(), unlocked.UnixMicro(), "%v: the floor is the clock at the Unlock", retention)
		assert.InDelta(t, float64(retention), float64(admin.PTTL(ctx, fence).Val()), float64(time.Minute), "%v: the counter's life", retention)
		require.NoError(t, w.Unlock(ctx))
	}
}

// TestHandOffRefusedKeepsTheQueue: a hand-off that can mint no token (an
// exhausted counter, one that is not a number) changes nothing, the
// waiter's place in the server-side queue included, so that the ordinary
// release that follows still reserves the name for it.
func TestHandOffRefusedKeepsTheQueue(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	for _, counter := range []string{fmt.Sprint(1<<53 - 1), "junk"} {
		tag := rlKey("spent-" + counter)
		keys := []string{tag, tag + ":fence", tag + scripts.ReleasedSuffix, tag + scripts.QueueSuffix}
		require.NoError(t, admin.Set(ctx, keys[0], "holder", time.Minute).Err())
		require.NoError(t, admin.Set(ctx, keys[1], counter, time.Hour).Err())
		alive := float64(time.Now().Add(time.Minute).UnixMilli())
		require.NoError(t, admin.ZAdd(ctx, keys[3], redis.Z{Score: -4503599627370496, Member: "o:w1"}, redis.Z{Score: alive, Member: "a:w1"}).Err())
		res, err := scripts.HandOff.Run(ctx, admin, keys, "holder", "next", 30000, "1", "w1").Int64Slice()
		require.NoError(t, err)
		assert.NotEqual(t, int64(scripts.ReplyOK), res[0], "counter %q: no token, no hand-off", counter)
		members, err := admin.ZRange(ctx, keys[3], 0, -1).Result()
		require.NoError(t, err)
		assert.ElementsMatch(t, []string{"o:w1", "a:w1"}, members, "counter %q: the waiter keeps its place", counter)
		assert.Equal(t, "holder", admin.Get(ctx, keys[0]).Val(), "counter %q: the lock is untouched", counter)
		assert.Equal(t, counter, admin.Get(ctx, keys[1]).Val(), "counter %q", counter)
	}
}

// TestHandOffRefusalsLeaveTheKey: a hand-off that does not pass the name
// leaves the lock key's value and expiry as they were, whatever stops it:
// another owner's key (also after this owner's release), a writer of
// another process first in the queue, a counter that can mint no token, a
// full server. Its first write takes the name for the next owner and
// answers the owner it found; the refusals put that owner back. A put-back
// that lost the holder's lease (the next owner's TTL, or none) would show
// in the key's PTTL, and a hand-off that did not run writes no released
// marker.
func TestHandOffRefusalsLeaveTheKey(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	const lease = time.Minute
	for _, tc := range []struct {
		name    string
		holder  string
		counter string // "" for none
		marker  string // the released marker's value before, "" for none
		queued  bool   // a writer of another process waits first
		full    bool
		want    int64
	}{
		{name: "another owner's", holder: "other", want: scripts.ReplyNotOurs},
		{name: "another owner's after ours", holder: "other", marker: "me", want: scripts.ReplyAlready},
		{name: "writer first", holder: "me", queued: true, want: scripts.ReplyWriterFirst},
		{name: "counter exhausted", holder: "me", counter: fmt.Sprint(1<<53 - 1), want: scripts.ReplyExhausted},
		{name: "counter not a number", holder: "me", counter: "junk", want: scripts.ReplyBadFence},
		{name: "full server", holder: "me", full: true, want: scripts.ReplyOOM},
	} {
		tag := rlKey("kept-" + strings.ReplaceAll(tc.name, " ", "-"))
		keys := []string{tag, tag + ":fence", tag + scripts.ReleasedSuffix, tag + scripts.QueueSuffix}
		require.NoError(t, admin.Set(ctx, keys[0], tc.holder, lease).Err())
		if tc.counter != "" {
			require.NoError(t, admin.Set(ctx, keys[1], tc.counter, time.Hour).Err())
		}
		if tc.marker != "" {
			require.NoError(t, admin.Set(ctx, keys[2], tc.marker, lease).Err())
		}
		if tc.queued {
			alive := float64(time.Now().Add(time.Minute).UnixMilli())
			require.NoError(t, admin.ZAdd(ctx, keys[3], redis.Z{Score: -4503599627370496, Member: "o:w1"}, redis.Z{Score: alive, Member: "a:w1"}).Err())
		}
		unfill := func() {}
		if tc.full {
			unfill = fillMemory(t, srv)
		}
		res, err := scripts.HandOff.Run(ctx, admin, keys, "me", "next", 10000, "1", "").Int64Slice()
		unfill()
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.want, res[0], "%s: the reply", tc.name)
		assert.Equal(t, tc.holder, get(t, admin, keys[0]), "%s: the holder", tc.name)
		pttl := admin.PTTL(ctx, keys[0]).Val()
		assert.Greater(t, pttl, lease-10*time.Second, "%s: the holder's lease, not the next owner's", tc.name)
		assert.LessOrEqual(t, pttl, lease, "%s: the holder's lease", tc.name)
		assert.Equal(t, tc.marker, admin.Get(ctx, keys[2]).Val(), "%s: the released marker as it was", tc.name)
	}
}

// TestHandOffWaiterOptions: a hand-off in process grants the lock with the
// waiter's own options, not the holder's: its metadata, fencing off (token
// 0) and no auto-renewal (its short lease runs out), as an acquire of its
// own would.
func TestHandOffWaiterOptions(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t), WithRetry(ConstantRetry(time.Hour)), WithLossTracking(false), WithTTL(5*time.Second))
	ctx := context.Background()
	const name = "handoff-options"
	holder, err := lk.TryLock(ctx, name, WithMetadata("holder"))
	require.NoError(t, err)
	require.Positive(t, holder.Token())
	waiter := waitBehind(t, lk, name, WithMetadata("waiter"), WithFencing(false), WithAutoRenew(false), WithTTL(500*time.Millisecond))
	publishes := commandCalls(t, srv, "publish")
	require.NoError(t, holder.Unlock(ctx))
	w := waiter()
	assert.Equal(t, publishes, commandCalls(t, srv, "publish"), "PUBLISH calls: not a hand-off")
	assert.Equal(t, "waiter", w.Metadata(), "Metadata() of the handed lock")
	h, err := lk.Inspect(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, "waiter", h.Metadata, "Inspect().Metadata of the handed lock")
	assert.Zero(t, w.Token(), "Token() of a waiter with fencing off")
	waitDone(t, w, 3*time.Second)
	requireLoss(t, w.Err(), LossExpired)
}

// TestHandOffKeepsTheLeaseInForce: a waiter that renews a lease of the
// holder's TTL takes over the holder's lease as it stands while the
// holder's next renewal is more than a node timeout away. The key keeps its
// expiry (the script sends no PEXPIRE for it: 5 commands), the waiter's
// validity is the holder's, never past the key's expiry, and its watchdog
// renews when the holder's would have. Metadata, when the waiter has some,
// lives as long as the lease.
func TestHandOffKeepsTheLeaseInForce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	// Renewals every 3 s, a node timeout of 200 ms: the hand-off below
	// keeps the lease if it runs within 2.8 s of the holder's grant, and
	// nothing renews it before the checks that follow.
	lk := newLocker(t, srv.Client(t), WithTTL(9*time.Second), WithNodeTimeout(200*time.Millisecond),
		WithRetry(ConstantRetry(time.Hour)), WithLossTracking(false))
	for _, metadata := range []string{"", "the waiter's"} {
		name := "inherit-" + strings.ReplaceAll(metadata, " ", "-")
		key := rlKey(name)
		holder, err := lk.TryLock(ctx, name)
		require.NoError(t, err)
		var opts []Option
		if metadata != "" {
			opts = append(opts, WithMetadata(metadata))
		}
		waiter := waitBehind(t, lk, name, opts...)
		waitSubscribers(t, srv, key+scripts.ChannelSuffix, 1)
		leaseBefore := admin.PTTL(ctx, key).Val()
		before := allCalls(t, srv)
		require.NoError(t, holder.Unlock(ctx))
		w := waiter()
		after := allCalls(t, srv)
		lease := admin.PTTL(ctx, key).Val()
		checked := time.Now()

		total, each := commandsRan(before, after)
		if metadata == "" {
			assert.Equal(t, 5, total, "server commands of a hand-off that keeps the lease:%s", each)
		} else {
			assert.Equal(t, 7, total, "server commands, with the metadata's PTTL and SET:%s", each)
			assert.InDelta(t, float64(lease), float64(admin.PTTL(ctx, key+":meta").Val()), float64(500*time.Millisecond), "the metadata lives as long as the lease")
			assert.Equal(t, metadata, w.Metadata())
		}
		assert.LessOrEqual(t, lease, leaseBefore, "%q: the key's expiry did not move", name)
		assert.Equal(t, holder.Until(), w.Until(), "%q: the holder's validity", name)
		assert.False(t, w.Until().After(checked.Add(lease)), "%q: validity within the key's lease", name)
		assert.Greater(t, w.Token(), holder.Token())
		assert.Equal(t, w.Owner(), get(t, admin, key))

		// The watchdog renews the lease it took over when the holder's
		// renewal was due, and the guard it took lets that renewal through.
		handed := w.Until()
		require.True(t, eventually(10*time.Second, func() bool { return w.Until().After(handed) }), "%q: the lease renewed", name)
		require.NoError(t, w.Err())
		assert.Greater(t, admin.PTTL(ctx, key).Val(), 7*time.Second, "%q: renewed to the TTL", name)
		require.NoError(t, w.Unlock(ctx))
	}
}

// TestHandOffLeaseOfItsOwn: a waiter gets a lease of its own TTL from the
// Unlock, as its own acquire would give, when it does not renew, when its
// TTL is not the holder's, when the holder's next renewal is due within a
// node timeout (renewals every 50 ms here, the node timeout 200 ms), and
// when an Extend of the holder went unanswered (the key's lease is then
// unknown: a paused server may run it yet).
func TestHandOffLeaseOfItsOwn(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		holder []Option
		waiter []Option
		before func(l *Lock, cl *redis.Client)
	}{
		{name: "no renewal", waiter: []Option{WithAutoRenew(false)}},
		{name: "another TTL", waiter: []Option{WithTTL(8 * time.Second)}},
		{name: "renewal due", holder: []Option{WithRenewInterval(50 * time.Millisecond)}, waiter: []Option{WithRenewInterval(50 * time.Millisecond)}},
		{name: "Extend unanswered", before: func(l *Lock, cl *redis.Client) {
			srv.Pause(t)
			err := l.Extend(ctx, 6*time.Second)
			srv.Resume(t)
			require.Error(t, err, "Extend() on a paused server")
			require.NoError(t, l.Err())
			// The timed-out Extend closed its connection: dial again
			// before the Unlock, whose node timeout a slow dial could spend.
			require.NoError(t, cl.Ping(ctx).Err())
		}},
	} {
		cl := srv.Client(t)
		lk := newLocker(t, cl, WithTTL(6*time.Second), WithNodeTimeout(200*time.Millisecond),
			WithRetry(ConstantRetry(time.Hour)), WithLossTracking(false))
		name := "own-" + strings.ReplaceAll(tc.name, " ", "-")
		holder, err := lk.TryLock(ctx, name, tc.holder...)
		require.NoError(t, err)
		if tc.before != nil {
			tc.before(holder, cl)
		}
		waiter := waitBehind(t, lk, name, tc.waiter...)
		unlocked := time.Now()
		require.NoError(t, holder.Unlock(ctx))
		w := waiter()
		assert.True(t, w.Until().After(holder.Until()), "%s: a lease of its own", tc.name)
		assert.True(t, w.Until().After(unlocked.Add(5*time.Second)), "%s: measured from the Unlock", tc.name)
		assert.Greater(t, admin.PTTL(ctx, rlKey(name)).Val(), 5*time.Second, "%s: the key's lease", tc.name)
		require.NoError(t, w.Unlock(ctx))
	}
}

// TestHandOffCapCycleCommands: the Unlock that ends a run of 8 hand-offs
// releases the name and wakes the goroutine of ours at the head of the
// queue, which takes it with an attempt. With nobody refused on the way
// (every waiter queued behind a holder of its own Locker), that cycle is
// 7 commands: the release (EVALSHA, MGET, RENAME; nobody marked the name
// waited for, so nothing is published) and the attempt (EVALSHA, SET NX,
// and the token's SET and PEXPIRE). The waiter, never entered in the
// name's queue on the server, has no entry for the attempt to remove.
func TestHandOffCapCycleCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t), WithAutoRenew(false), WithLossTracking(false))
	ctx := context.Background()
	const name = "cap-cycle"
	l, err := lk.TryLock(ctx, name)
	require.NoError(t, err)
	// A waiter's own timer never wakes it here: only a hand-off or the
	// release does.
	slow := WithRetry(ConstantRetry(time.Minute))
	for range 8 {
		next := waitBehind(t, lk, name, slow)
		require.NoError(t, l.Unlock(ctx))
		l = next()
	}
	next := waitBehind(t, lk, name, slow)
	before := allCalls(t, srv)
	require.NoError(t, l.Unlock(ctx))
	l = next()
	total, each := commandsRan(before, allCalls(t, srv))
	assert.Equal(t, 7, total, "commands of the release that ends the run of hand-offs and of the grant after it:%s", each)
	require.NoError(t, l.Unlock(ctx))
}

// TestOwnHolderRefusalMarksNothing: a waiter refused by a holder of its own
// Locker enters the name's queue on the server, so that waiters of other
// processes queue behind it, but does not mark the name waited for: that
// holder's Unlock hands it the name, or wakes it, without a message, so
// the release need not publish. The waiter here tries every millisecond,
// and each try is refused, until the holder's Unlock hands it the name.
func TestOwnHolderRefusalMarksNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	lk := newLocker(t, srv.Client(t), WithLossTracking(false))
	ctx := context.Background()
	const name = "own-refusal"
	l, err := lk.TryLock(ctx, name)
	require.NoError(t, err)
	refusals := commandCalls(t, srv, "pttl") // a refusal reads the holder's lease
	next := waitBehind(t, lk, name, WithRetry(ConstantRetry(time.Millisecond)))
	writersQueued(t, srv, name, 1)
	require.True(t, eventually(5*time.Second, func() bool { return commandCalls(t, srv, "pttl") >= refusals+3 }),
		"the waiter's attempts were not refused three times")
	marked, err := admin.Exists(ctx, rlKey(name)+scripts.WaitSuffix).Result()
	require.NoError(t, err)
	assert.Zero(t, marked, "the name's waiting mark after refusals by the waiter's own Locker")
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, next().Unlock(ctx))
}
