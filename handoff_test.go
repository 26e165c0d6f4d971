package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// TestHandOffInProcess: an Unlock with a goroutine of the same Locker
// waiting passes the lock in one script: no PUBLISH, no acquire by the
// waiter, a fresh owner and a larger token, and the waiter's own options.
func TestHandOffInProcess(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	lk := newLocker(t, srv.Client(t), WithRetry(ConstantRetry(time.Hour)))
	ctx := context.Background()
	for i := range 5 {
		holder, err := lk.TryLock(ctx, "handoff")
		require.NoError(t, err)
		got := make(chan *Lock, 1)
		go func() {
			w, err := lk.Lock(ctx, "handoff", WithTTL(3*time.Second), WithAutoRenew(false))
			assert.NoError(t, err)
			got <- w
		}()
		waiting(t, lk.c, "handoff")
		// The waiter's first (failed) attempt and its SUBSCRIBE are done
		// once it waits: from here on only the hand-off may run.
		publishes, scripts := commandCalls(t, srv, "publish"), commandCalls(t, srv, "evalsha")
		unlocked := time.Now()
		require.NoError(t, holder.Unlock(ctx))
		w := <-got
		require.NotNil(t, w)
		assert.Equal(t, 0, commandCalls(t, srv, "publish")-publishes, "round %d: a hand-off publishes nothing", i)
		assert.Equal(t, 1, commandCalls(t, srv, "evalsha")-scripts, "round %d: one script for release and grant", i)
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

// TestHandOffRacesWaiterLeaving: waiters whose ctx ends while Unlocks hand
// them the lock leave nothing behind: every hand-off either reaches a waiter
// that then owns the lock, or is released.
func TestHandOffRacesWaiterLeaving(t *testing.T) {
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

// TestHandOffClose: Close while Unlocks hand locks to waiters leaves no key.
func TestHandOffClose(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	for round := range 20 {
		lk, err := NewLocker(srv.Client(t))
		require.NoError(t, err)
		name := fmt.Sprintf("close-handoff-%d", round)
		holder, err := lk.TryLock(ctx, name)
		require.NoError(t, err)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				if w, err := lk.Lock(ctx, name); err == nil {
					_ = w.Unlock(ctx)
				}
			})
		}
		waiting(t, lk.c, name)
		wg.Go(func() { _ = holder.Unlock(ctx) })
		wg.Go(func() { _ = lk.Close() })
		wg.Wait()
	}
	assert.True(t, eventually(2*time.Second, func() bool {
		keys, _ := admin.Keys(ctx, "{redlock:close-handoff-*}").Result()
		return len(keys) == 0
	}), "keys left after Close raced hand-offs")
}

// TestHandOffLetsOtherProcessesIn: a process whose goroutines keep its local
// queue full hands the name on among themselves at most maxHandOffs times in
// a row, so a waiter of another process still gets the lock.
func TestHandOffLetsOtherProcessesIn(t *testing.T) {
	srv := redistest.Start(t)
	busy := newLocker(t, srv.Client(t))
	other := newLocker(t, srv.Client(t))
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := busy.Lock(ctx, "hog")
				if err != nil {
					return
				}
				time.Sleep(time.Millisecond) // the critical section
				_ = l.Unlock(ctx)
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	waiting(t, busy.c, "hog")
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := other.Lock(lctx, "hog")
	require.NoError(t, err, "another process's waiter starved by hand-offs")
	require.NoError(t, l.Unlock(ctx))
}

// TestReservedWaiterWokenByHead: a release passed the name to a waiter of
// this Locker that is not the head of its queue, and its wake-up message was
// lost (it came before the subscription). The head, refused by the
// reservation, wakes it, instead of the name staying reserved for nobody
// until the reservation lapses.
func TestReservedWaiterWokenByHead(t *testing.T) {
	srv := redistest.Start(t)
	cl := srv.Client(t)
	lk := newLocker(t, cl, WithRetry(func(int) time.Duration { return 50 * time.Millisecond }))
	ctx := context.Background()
	const key = "{redlock:resv}"
	require.NoError(t, cl.Set(ctx, key, "external", 300*time.Millisecond).Err())
	got := make(chan *Lock, 2)
	lock := func() {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := lk.Lock(c, "resv")
		assert.NoError(t, err)
		got <- l
	}
	go lock()
	waiting(t, lk.c, "resv")
	go lock()
	var second string
	require.True(t, eventually(5*time.Second, func() bool {
		lk.c.waits.mu.Lock()
		defer lk.c.waits.mu.Unlock()
		q := lk.c.waits.queues[releaseChannel(key)]
		if q == nil || len(q.list) < 2 {
			return false
		}
		second = q.list[1].wid
		return true
	}))
	// Passed to the second waiter, whose message never came; the
	// reservation outlasts both calls' deadlines.
	require.NoError(t, cl.Set(ctx, key, reservedPrefix+second, 10*time.Second).Err())
	l := <-got
	require.NotNil(t, l, "the reserved waiter took the name")
	require.NoError(t, l.Unlock(ctx))
	l = <-got
	require.NotNil(t, l, "and the head after it")
	require.NoError(t, l.Unlock(ctx))
}

// TestHandOffSkipsWaitersThatGaveUp (the rueidislock suite's MissingPeers
// case): 100 waiters whose ctx was cancelled before the holder's Unlock
// are never handed the lock, and none returns one; the name is free for
// another Locker as soon as they have all returned. 20 rounds.
func TestHandOffSkipsWaitersThatGaveUp(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	lk := newLocker(t, srv.Client(t), WithRetry(ConstantRetry(time.Hour)))
	other := newLocker(t, srv.Client(t))
	ctx := context.Background()
	const waiters = 100
	ch := releaseChannel(lockKey(lk.c.cfg.prefix, "gave-up"))
	queued := func() int {
		lk.c.waits.mu.Lock()
		defer lk.c.waits.mu.Unlock()
		if q := lk.c.waits.queues[ch]; q != nil {
			return len(q.list)
		}
		return 0
	}
	for round := range 20 {
		holder, err := lk.TryLock(ctx, "gave-up")
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(ctx)
		errs := make(chan error, waiters)
		for range waiters {
			go func() {
				w, err := lk.Lock(wctx, "gave-up")
				if err == nil {
					err = fmt.Errorf("Lock() = %v with a cancelled ctx, want an error", w.Owner())
					_ = w.Unlock(ctx)
				}
				errs <- err
			}()
		}
		require.True(t, eventually(5*time.Second, func() bool { return queued() == waiters }), "round %d: %d of %d waiters queued", round, queued(), waiters)
		cancel()
		require.NoError(t, holder.Unlock(ctx))
		for range waiters {
			err := <-errs
			require.ErrorIs(t, err, ErrNotObtained, "round %d", round)
			require.ErrorIs(t, err, context.Canceled, "round %d", round)
		}
		require.True(t, eventually(time.Second, func() bool { return get(t, admin, "{redlock:gave-up}") == "" }),
			"round %d: the name is still held by %q after every waiter gave up", round, get(t, admin, "{redlock:gave-up}"))
		l, err := other.TryLock(ctx, "gave-up")
		require.NoError(t, err, "round %d: TryLock after every waiter gave up", round)
		require.NoError(t, l.Unlock(ctx))
	}
}

// TestHandOffPassesOverGivenUpHead: a waiter whose ctx ended but which has
// not left the queue yet (its Lock call is still on its way out) is passed
// over: the Unlock hands the lock to the live waiter behind it, and the one
// that gave up is handed nothing.
func TestHandOffPassesOverGivenUpHead(t *testing.T) {
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t), WithRetry(ConstantRetry(time.Hour)))
	ctx := context.Background()
	holder, err := lk.TryLock(ctx, "dead-head")
	require.NoError(t, err)
	ch := releaseChannel(lockKey(lk.c.cfg.prefix, "dead-head"))
	gone, cancel := context.WithCancel(ctx)
	cancel()
	dead, _ := lk.c.waits.join(ch, "dead-head", "", &lk.c.cfg, gone.Done())
	got := make(chan *Lock, 1)
	go func() {
		l, err := lk.Lock(ctx, "dead-head")
		assert.NoError(t, err)
		got <- l
	}()
	require.True(t, eventually(5*time.Second, func() bool {
		lk.c.waits.mu.Lock()
		defer lk.c.waits.mu.Unlock()
		return len(lk.c.waits.queues[ch].list) == 2
	}), "the live waiter never queued behind the one that gave up")
	require.NoError(t, holder.Unlock(ctx))
	select {
	case l := <-got:
		require.NotNil(t, l)
		assert.Greater(t, l.Token(), holder.Token())
		require.NoError(t, l.Unlock(ctx))
	case <-time.After(2 * time.Second):
		t.Fatal("the live waiter was not handed the lock within 2s; the hand-off went to the waiter that gave up")
	}
	assert.Empty(t, dead.handed, "a waiter that gave up was handed a lock")
	lk.c.waits.leave(ch, dead, false)
}
