package redlock

import (
	"context"
	"errors"
	"fmt"
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

// TestCloseReleases: Close releases held locks (Done closed, ErrReleased, keys
// gone), stops the watchdog, and refuses new acquisitions.
func TestCloseReleases(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	lk, err := NewLocker(cl)
	if err != nil {
		t.Fatalf("NewLocker() = %v", err)
	}
	ctx := context.Background()
	var locks []*Lock
	for i := range 100 {
		l, err := lk.TryLock(ctx, fmt.Sprintf("close-%d", i), WithAutoRenew(i%2 == 0))
		if err != nil {
			t.Fatalf("TryLock() = %v", err)
		}
		locks = append(locks, l)
	}
	if err := lk.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	for i, l := range locks {
		select {
		case <-l.Done():
		default:
			t.Fatalf("lock %d: Done open after Close", i)
		}
		if err := l.Err(); !errors.Is(err, ErrReleased) {
			t.Errorf("lock %d: Err() after Close = %v, want ErrReleased", i, err)
		}
	}
	if keys := cl.Keys(ctx, "{redlock:close-*}").Val(); len(keys) != 0 {
		t.Errorf("%d keys left after Close, want 0", len(keys))
	}
	if _, err := lk.TryLock(ctx, "after-close"); !errors.Is(err, ErrClosed) {
		t.Errorf("TryLock() after Close = %v, want ErrClosed", err)
	}
	if err := lk.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
}

// TestCloseWhileWaiting: Close with goroutines waiting (and some about to
// wait) returns, the waiters fail with ErrClosed, and no goroutine is left.
func TestCloseWhileWaiting(t *testing.T) {
	t.Parallel()
	cl, _ := miniClient(t)
	lk, err := NewLocker(cl)
	if err != nil {
		t.Fatalf("NewLocker() = %v", err)
	}
	other := newLocker(t, cl)
	ctx := context.Background()
	if _, err := other.TryLock(ctx, "busy"); err != nil {
		t.Fatalf("TryLock() = %v", err)
	}
	errs := make(chan error, 20)
	for range 20 {
		go func() {
			_, err := lk.Lock(ctx, "busy")
			errs <- err
		}()
	}
	waiting(t, lk.c, "busy")
	closed := make(chan struct{})
	go func() { lk.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatalf("Close() did not return within 5s with waiters")
	}
	for range 20 {
		if err := <-errs; !errors.Is(err, ErrClosed) && !errors.Is(err, ErrNotObtained) {
			t.Errorf("waiter Lock() after Close = %v, want ErrClosed or ErrNotObtained", err)
		}
	}
}

// TestClosedWaiterLeavesQueue: a Lock waiting for a held name when its
// Locker is closed returns ErrClosed and, before it returns, withdraws its
// entry from the name's queue of waiting writers, although the closed core
// may start no goroutine: otherwise the holder's release would reserve the
// name for a waiter that is gone.
func TestClosedWaiterLeavesQueue(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	holder := newLocker(t, srv.Client(t))
	waiter, err := NewLocker(defaultClient(t, srv))
	require.NoError(t, err)
	ctx := context.Background()
	l, err := holder.TryLock(ctx, "closed-waiter")
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(ctx, "closed-waiter")
		done <- err
	}()
	writersQueued(t, srv, "closed-waiter", 1)
	require.NoError(t, waiter.Close())
	require.ErrorIs(t, <-done, ErrClosed)

	n, err := queuedWriters(admin, "{redlock:closed-waiter}:queue")
	require.NoError(t, err)
	assert.Zero(t, n, "the closed waiter's entry is still queued")
	require.NoError(t, l.Unlock(ctx))
	assert.Empty(t, get(t, admin, rlKey("closed-waiter")), "the release reserved the name for the closed waiter")
}

// TestCloseCancelsDo: Close cancels running Do calls before their locks
// can be taken by another owner.
func TestCloseCancelsDo(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk, err := NewLocker(srv.Client(t))
	require.NoError(t, err)
	other := newLocker(t, srv.Client(t))
	ctx := context.Background()

	started := make(chan struct{})
	result := make(chan error, 1)
	var cause error
	go func() {
		result <- lk.Do(ctx, "do-close", func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return nil
		})
	}()
	<-started
	require.NoError(t, lk.Close())
	err = <-result
	assert.ErrorIs(t, cause, ErrClosed, "fn's ctx cause after Close")
	assert.ErrorIs(t, err, ErrLost, "Do() after Close")
	assert.ErrorIs(t, err, ErrClosed, "Do() after Close")
	l, err := other.TryLock(ctx, "do-close")
	require.NoError(t, err, "TryLock() by another owner after Close")
	require.NoError(t, l.Unlock(ctx))
}

// TestGrantAfterCloseReleased: an acquisition whose grant arrives after
// Close started releases it; the name is free at once, not after the TTL.
func TestGrantAfterCloseReleased(t *testing.T) {
	t.Parallel()
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprintf("inline=%v", inline), func(t *testing.T) {
			srv := redistest.Start(t)
			proxy := redistest.NewProxy(t, srv.Addr())
			cl := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: inline, MaxRetries: -1})
			t.Cleanup(func() { cl.Close() })
			lk, err := NewLocker(cl, WithNodeTimeout(time.Second))
			require.NoError(t, err)
			admin := srv.Client(t)
			proxy.SetDelay(300 * time.Millisecond)

			res := make(chan error, 1)
			go func() {
				_, err := lk.TryLock(context.Background(), "late")
				res <- err
			}()
			require.True(t, eventually(2*time.Second, func() bool { return admin.Exists(context.Background(), "{redlock:late}").Val() == 1 }),
				"the grant never reached the server")
			require.NoError(t, lk.Close())
			err = <-res
			assert.ErrorIs(t, err, ErrNotObtained)
			assert.ErrorIs(t, err, ErrClosed)
			assert.True(t, eventually(2*time.Second, func() bool { return admin.Exists(context.Background(), "{redlock:late}").Val() == 0 }),
				"grant that nobody owns still on the server (PTTL %v)", admin.PTTL(context.Background(), "{redlock:late}").Val())
		})
	}
}

// TestConcurrentUnlockAndClose: Close racing Unlock, renewal and in-flight
// grants leaves no key and no held lock behind.
func TestConcurrentUnlockAndClose(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	for round := range 10 {
		lk, err := NewLocker(srv.Client(t), WithTTL(200*time.Millisecond))
		require.NoError(t, err)
		ctx := context.Background()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var got []*Lock
		for i := range 8 {
			wg.Go(func() {
				l, err := lk.TryLock(ctx, fmt.Sprintf("race-%d-%d", round, i))
				if err != nil {
					return
				}
				mu.Lock()
				got = append(got, l)
				mu.Unlock()
				_ = l.Unlock(ctx)
			})
		}
		wg.Go(func() { _ = lk.Close() })
		wg.Wait()
		for _, l := range got {
			assert.Error(t, l.Err())
		}
	}
	assert.True(t, eventually(time.Second, func() bool {
		keys, _ := admin.Keys(context.Background(), "{redlock:race-*}").Result()
		return len(keys) == 0
	}), "keys left after Close raced Unlock and grants")
}

// TestCloseBoundedDuringInlineRenewal: with a client that applies ctx
// deadlines itself, renewals run inline in the watchdog; Close must not
// wait for one stuck on a paused server.
func TestCloseBoundedDuringInlineRenewal(t *testing.T) {
	srv := redistest.Start(t)
	const nodeTimeout = 100 * time.Millisecond
	lk, err := NewLocker(deadlineClient(t, srv), WithTTL(3*time.Second), WithNodeTimeout(nodeTimeout), WithRenewInterval(100*time.Millisecond))
	require.NoError(t, err)
	ctx := context.Background()
	l, err := lk.TryLock(ctx, "inline-renew")
	require.NoError(t, err)
	srv.Pause(t)
	defer srv.Resume(t)
	// The watchdog holds the lock's io mutex while its renewal is on the wire.
	require.True(t, eventually(2*time.Second, func() bool {
		if l.ref().IO.TryLock() {
			l.ref().IO.Unlock()
			return false
		}
		return true
	}), "no renewal started")
	start := time.Now()
	require.NoError(t, lk.Close())
	assert.Less(t, time.Since(start), nodeTimeout+200*time.Millisecond, "Close() waited for an inline renewal")
	assert.ErrorIs(t, l.Err(), ErrClosed)
}

// TestHandOffClose: Close while Unlocks hand locks to waiters leaves no key.
func TestHandOffClose(t *testing.T) {
	t.Parallel()
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

// TestRedlockCloseBounded: Close returns within one node timeout (plus
// slack) with held locks on paused or refusing masters.
func TestRedlockCloseBounded(t *testing.T) {
	const nodeTimeout = 150 * time.Millisecond
	for _, tc := range []struct {
		name  string
		fault func(t *testing.T, nodes []*rlNode)
	}{
		{"one paused", func(t *testing.T, nodes []*rlNode) { t.Cleanup(pause(t, nodes, 0)) }},
		{"three killed", func(t *testing.T, nodes []*rlNode) {
			for _, i := range []int{0, 1, 2} {
				nodes[i].srv.Kill(t)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := startRLNodes(t, 5, false, 3*time.Second)
			r := newRL(t, nodes, WithNodeTimeout(nodeTimeout))
			warmUp(t, r)
			ctx := context.Background()
			var locks []*Lock
			for i := range 20 {
				l, err := r.TryLock(ctx, fmt.Sprintf("close-%d", i))
				require.NoError(t, err)
				locks = append(locks, l)
			}
			// A waiter, so pub/sub connections exist too.
			waitCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			waited := make(chan error, 1)
			go func() {
				_, err := r.Lock(waitCtx, "close-0")
				waited <- err
			}()
			waiting(t, r.c, "close-0")
			tc.fault(t, nodes)

			start := time.Now()
			require.NoError(t, r.Close())
			took := time.Since(start)
			assert.Less(t, took, nodeTimeout+200*time.Millisecond, "Close() took %v", took)
			assert.ErrorIs(t, <-waited, ErrClosed)
			for _, l := range locks {
				assert.ErrorIs(t, l.Err(), ErrReleased)
				assert.ErrorIs(t, l.Err(), ErrClosed)
			}
		})
	}
}

// TestClosedWaiterPassesOnReservation: a waiter whose Locker is closed
// while the name is reserved for it (a release made it "queued:<id>" and
// took it off the queue; its wake-up not acted on yet) passes the name on
// before Lock returns: the next waiter, of another Locker, gets it at
// once, not when the reservation (30 s) lapses.
func TestClosedWaiterPassesOnReservation(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	const name = "closed-reserved"
	key, queue := rlKey(name), rlKey(name)+scripts.QueueSuffix
	hour := WithRetry(ConstantRetry(time.Hour))
	require.NoError(t, admin.Set(ctx, key, "someone", 30*time.Second).Err())
	first, err := NewLocker(defaultClient(t, srv))
	require.NoError(t, err)
	next := newLocker(t, srv.Client(t))
	firstDone := make(chan error, 1)
	go func() {
		_, err := first.Lock(ctx, name, hour)
		firstDone <- err
	}()
	writersQueued(t, srv, name, 1)
	got := make(chan *Lock, 1)
	go func() {
		l, err := next.Lock(ctx, name, hour)
		assert.NoError(t, err, "the next waiter's Lock()")
		got <- l
	}()
	writersQueued(t, srv, name, 2)
	// Both waiters listen before the name moves: the next waiter's queue
	// entry comes with its refusal, before its SUBSCRIBE, and its hour-long
	// policy hears of the hand-off only by message.
	waitSubscribers(t, srv, key+scripts.ChannelSuffix, 2)
	// What a release does for the head of the queue, without its message:
	// the name reserved for it, its entry gone.
	head, err := admin.ZRangeByScore(ctx, queue, &redis.ZRangeBy{Min: "-inf", Max: "(0", Count: 1}).Result()
	require.NoError(t, err)
	require.Len(t, head, 1)
	id := strings.TrimPrefix(head[0], "o:")
	require.NoError(t, admin.Set(ctx, key, scripts.ReservedPrefix+id, 30*time.Second).Err())
	require.NoError(t, admin.ZRem(ctx, queue, "o:"+id, "a:"+id).Err())

	require.NoError(t, first.Close())
	require.ErrorIs(t, <-firstDone, ErrClosed, "the reserved waiter's Lock() after Close")
	select {
	case l := <-got:
		require.NotNil(t, l)
		require.NoError(t, l.Unlock(ctx))
	case <-time.After(5 * time.Second):
		t.Fatal("the next waiter did not get the name within 5s of Close (the reservation lasts 30s)")
	}
}
