package redlock

// Regression tests for the promises that broke under faults (issue "trust"):
// each one failed on the engine before the fix and must keep passing.

import (
	"context"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/history"
	"github.com/redlockgo/redlock/internal/redistest"
)

// TestRedlockMinorityHungKeepsLocks: a Redlock exists to tolerate a hung
// minority. With one master paused (or answering slower than the TTL),
// auto-renewed locks stay held, Do returns nil, and Extend and Unlock settle
// as soon as the quorum answered.
func TestRedlockMinorityHungKeepsLocks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		delay bool // a proxy delays replies instead of pausing the server
	}{
		{"5 masters, 1 paused", 5, false},
		{"3 masters, 1 paused", 3, false},
		{"3 masters, 1 slower than the TTL", 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A node timeout close to the TTL, so that "settled at the
			// quorum" (milliseconds) and "waited for the hung node" (the
			// node timeout) stay far apart even on a loaded machine.
			const ttl, nodeTimeout = 400 * time.Millisecond, 300 * time.Millisecond
			nodes := startRLNodes(t, tc.n, tc.delay, 3*time.Second)
			r := newRL(t, nodes, WithTTL(ttl), WithNodeTimeout(nodeTimeout))
			warmUp(t, r)
			ctx := context.Background()
			if tc.delay {
				nodes[0].proxy.SetDelay(2 * ttl)
			} else {
				defer pause(t, nodes, 0)()
			}

			l, err := r.TryLock(ctx, "minority")
			require.NoError(t, err, "TryLock() with a hung minority")
			err = r.Do(ctx, "minority-do", func(ctx context.Context) error {
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-time.After(4 * ttl): // the work under test: held across several renewals
					return nil
				}
			})
			assert.NoError(t, err, "Do() held for 4 TTLs with a hung minority")
			assert.NoError(t, l.Err(), "Err() after 4 TTLs with a hung minority")
			select {
			case <-l.Done():
				t.Errorf("Done() closed with a hung minority, want held")
			default:
			}

			start := time.Now()
			require.NoError(t, l.Extend(ctx, ttl), "Extend() with a hung minority")
			assert.Less(t, time.Since(start), nodeTimeout-50*time.Millisecond, "Extend() waited for the hung node")
			start = time.Now()
			require.NoError(t, l.Unlock(ctx), "Unlock() with a hung minority")
			assert.Less(t, time.Since(start), nodeTimeout-50*time.Millisecond, "Unlock() waited for the hung node")
		})
	}
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

// TestNewRedlockSameServerTwice: one server given under two spellings is
// one vote, never two.
func TestNewRedlockSameServerTwice(t *testing.T) {
	srvs := redistest.StartN(t, 2)
	client := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		return c
	}
	port := strings.TrimPrefix(srvs[1].Addr(), "127.0.0.1:")
	_, err := NewRedlock([]Client{client(srvs[0].Addr()), client(srvs[1].Addr()), client("localhost:" + port)})
	require.Error(t, err, "NewRedlock() with 127.0.0.1:P and localhost:P")
	assert.Contains(t, err.Error(), "one server")

	t.Run("identified on first contact", func(t *testing.T) {
		// The shared server is paused while the Redlock is built, so its
		// identity is learnt only on first use: its second spelling must
		// then lose its vote.
		a, b := client(srvs[0].Addr()), client(srvs[1].Addr())
		alias := client("localhost:" + port)
		srvs[1].Pause(t)
		r, err := NewRedlock([]Client{a, b, alias}, WithNodeTimeout(200*time.Millisecond))
		srvs[1].Resume(t)
		require.NoError(t, err, "NewRedlock() with an unreachable master")
		t.Cleanup(func() { r.Close() })
		ctx := context.Background()
		l, err := r.TryLock(ctx, "alias")
		require.NoError(t, err, "TryLock() with 2 distinct masters up")
		require.NoError(t, l.Unlock(ctx))

		srvs[0].Pause(t)
		defer srvs[0].Resume(t)
		_, err = r.TryLock(ctx, "alias")
		assert.ErrorIs(t, err, ErrNotObtained, "TryLock() with only the aliased server up must not get a quorum from it")
		assert.ErrorIs(t, err, errDuplicate)
	})
}

// TestCloseCancelsDo: Close cancels running Do calls before their locks
// can be taken by another owner.
func TestCloseCancelsDo(t *testing.T) {
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

// TestDoCancelledByUnlockThroughContext: fn's ctx also ends when fn's lock
// is released through FromContext, and Do then returns fn's result.
func TestDoCancelledByUnlockThroughContext(t *testing.T) {
	cl, _ := miniClient(t)
	lk := newLocker(t, cl)
	err := lk.Do(context.Background(), "self", func(ctx context.Context) error {
		l, ok := FromContext(ctx)
		require.True(t, ok)
		require.NoError(t, l.Unlock(ctx))
		<-ctx.Done()
		assert.ErrorIs(t, context.Cause(ctx), ErrReleased)
		return nil
	})
	assert.NoError(t, err)
}

// TestGrantAfterCloseReleased: an acquisition whose grant arrives after
// Close started releases it; the name is free at once, not after the TTL.
func TestGrantAfterCloseReleased(t *testing.T) {
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

// TestNilLock: the methods of a nil *Lock report "not held" instead of
// panicking.
func TestNilLock(t *testing.T) {
	var l *Lock
	ctx := context.Background()
	assert.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
	assert.ErrorIs(t, l.Extend(ctx, time.Second), ErrNotHeld)
	assert.ErrorIs(t, l.Err(), ErrNotHeld)
	assert.Equal(t, "", l.Name())
	assert.Equal(t, "", l.Owner())
	assert.Equal(t, int64(0), l.Token())
	assert.True(t, l.Until().IsZero())
	select {
	case <-l.Done():
	default:
		t.Error("nil Lock's Done() is open, want closed")
	}
}

// TestErrExactAtUntil: Err reports the loss the moment Until passes, with
// or without the loss clock having fired, and Done closes with it.
func TestErrExactAtUntil(t *testing.T) {
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t), WithTTL(300*time.Millisecond), WithNodeTimeout(50*time.Millisecond))
	ctx := context.Background()
	const n = 200
	locks := make([]*Lock, n)
	for i := range locks {
		l, err := lk.TryLock(ctx, fmt.Sprintf("exact-%d", i))
		require.NoError(t, err)
		locks[i] = l
	}
	srv.Pause(t)
	defer srv.Resume(t)
	// Read Err just after each Until: it must already say lost.
	for _, l := range locks {
		for time.Now().Before(l.Until()) {
			time.Sleep(time.Until(l.Until()))
		}
		require.ErrorIs(t, l.Err(), ErrLost, "Err() after Until")
		select {
		case <-l.Done():
		default:
			t.Fatalf("Done() open after Err() reported the loss")
		}
	}
}

// TestLossClockScales: with thousands of auto-renewed locks on a paused
// server, every Done closes by Until plus a small slack, from one loss clock
// rather than a runtime timer per lock. The figure is logged; the assertion
// keeps a generous slack (the drift allowance of 1%+2ms) so that a loaded
// machine cannot make it fail while a late-by-design signal would. Every
// acquisition goes into a history; once the server resumes, another Locker
// takes a sample of the names, and the history must show no overlap and
// every Done closed before the new owner (SAFETY.md).
func TestLossClockScales(t *testing.T) {
	if testing.Short() {
		t.Skip("holds thousands of locks; skipped with -short")
	}
	srv := redistest.Start(t)
	const (
		n   = 20000
		ttl = 5 * time.Second
	)
	// Recorded by hand, without a goroutine per lock watching its Done:
	// 20,000 goroutines waking at once would delay the loss clock under test.
	rec := history.New()
	acqs := make([]*history.Acquisition, n)
	lk := newLocker(t, srv.Client(t), WithTTL(ttl), WithNodeTimeout(time.Second))
	ctx := context.Background()
	locks := make([]*Lock, n)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				l, err := lk.TryLock(ctx, fmt.Sprintf("loss-%d", i))
				if err != nil {
					t.Errorf("TryLock() = %v", err)
					return
				}
				acqs[i] = rec.Acquired(l.Name(), l.Owner(), l.Token(), time.Now(), l.Until())
				locks[i] = l
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	srv.Pause(t)
	defer srv.Resume(t)
	// What the machine does to any timer meanwhile: on a starved CPU no
	// goroutine wakes on time, the loss clock included. The property under
	// test is that the loss clock adds nothing beyond that (no pile-up of
	// 20,000 callbacks), so the allowance grows by the probe's worst delay.
	probeStop := make(chan struct{})
	probeDone := make(chan time.Duration, 1)
	go func() { probeDone <- timerDelay(probeStop, ttl+time.Minute) }()
	var worst time.Duration
	open := 0
	for i, l := range locks {
		<-l.Done()
		require.ErrorIs(t, l.Err(), ErrLost)
		rec.Renewed(acqs[i], l.Until())
		rec.DoneClosed(acqs[i], doneAt(l))
		rec.Lost(acqs[i], doneAt(l))
		l.mu.Lock()
		late := l.ended.Sub(l.until)
		l.mu.Unlock()
		if late > 0 {
			open++
		}
		worst = max(worst, late)
	}
	close(probeStop)
	sched := <-probeDone
	allowance := drift(ttl, 0.01)
	t.Logf("%d locks on a paused server: %d Done channels closed after their Until, the latest %v after it (drift allowance %v, worst timer delay of the machine meanwhile %v)", n, open, worst, allowance, sched)
	assert.Less(t, worst, allowance+sched, "Done closed after Until by more than the drift allowance plus the machine's own timer delay")

	srv.Resume(t)
	// Another owner gets every name once its key expires on the server. Not
	// necessarily at once: a renewal sent just before Until and held in the
	// paused server's socket buffer runs on resume, while the key still
	// lives (its server TTL outlasts Until by the drift allowance), and
	// extends a key nobody holds any more by one TTL. Lock waits for that.
	other := newLocker(t, srv.Client(t), WithAutoRenew(false))
	wctx, cancel := context.WithTimeout(ctx, 3*ttl)
	defer cancel()
	for i := 0; i < n; i += n / 200 {
		l, err := other.Lock(wctx, fmt.Sprintf("loss-%d", i))
		require.NoError(t, err, "another owner after the paused server resumed")
		a := rec.Acquired(l.Name(), l.Owner(), l.Token(), time.Now(), l.Until())
		rec.Released(a, time.Now())
		require.NoError(t, l.Unlock(ctx))
		rec.DoneClosed(a, doneAt(l))
	}
	assert.NoError(t, rec.Err())
}

// TestExtendBelowRenewInterval: Extend to a TTL shorter than the renew
// interval keeps the lock held on a healthy server.
func TestExtendBelowRenewInterval(t *testing.T) {
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t), WithTTL(3*time.Second), WithRenewInterval(time.Second))
	ctx := context.Background()
	// 300ms: below the interval; 1005ms: above it, but with a validity
	// (993ms) below it.
	for _, ttl := range []time.Duration{300 * time.Millisecond, 1005 * time.Millisecond} {
		l, err := lk.TryLock(ctx, "short-extend")
		require.NoError(t, err)
		require.NoError(t, l.Extend(ctx, ttl))
		time.Sleep(4 * ttl) // the duration under test: four of the extended TTLs
		assert.NoError(t, l.Err(), "Err() after Extend(%v) with a renew interval of 1s", ttl)
		require.NoError(t, l.Unlock(ctx))
	}
}

// TestOptionValuesRejected: every non-finite or out-of-range option value
// is refused, at construction and per call, and Extend refuses bad TTLs.
func TestOptionValuesRejected(t *testing.T) {
	cl, _ := miniClient(t)
	bad := map[string]Option{
		"drift NaN":          WithDriftFactor(math.NaN()),
		"drift +Inf":         WithDriftFactor(math.Inf(1)),
		"drift -Inf":         WithDriftFactor(math.Inf(-1)),
		"drift -0":           WithDriftFactor(math.Copysign(0, -1)),
		"drift 0.5":          WithDriftFactor(0.5),
		"TTL max int64":      WithTTL(math.MaxInt64),
		"TTL over a year":    WithTTL(maxTTL + time.Millisecond),
		"TTL zero":           WithTTL(0),
		"TTL negative":       WithTTL(-time.Second),
		"TTL sub-ms":         WithTTL(500 * time.Microsecond),
		"renew negative":     WithRenewInterval(-1),
		"renew >= validity":  WithRenewInterval(10 * time.Second),
		"node timeout < 0":   WithNodeTimeout(-1),
		"node timeout huge":  WithNodeTimeout(math.MaxInt64),
		"empty prefix":       WithKeyPrefix(""),
		"brace prefix":       WithKeyPrefix("a{"),
		"nil retry function": WithRetry(nil),
	}
	lk := newLocker(t, cl)
	for name, opt := range bad {
		t.Run(name, func(t *testing.T) {
			_, err := NewLocker(cl, opt)
			assert.Error(t, err, "NewLocker()")
			_, err = lk.TryLock(context.Background(), "opts", opt)
			assert.Error(t, err, "TryLock()")
			assert.NotErrorIs(t, err, ErrNotObtained, "a bad option is not a contended lock")
		})
	}
	l, err := lk.TryLock(context.Background(), "opts")
	require.NoError(t, err)
	for _, ttl := range []time.Duration{0, -1, time.Microsecond, maxTTL + 1, math.MaxInt64} {
		assert.Error(t, l.Extend(context.Background(), ttl), "Extend(%v)", ttl)
	}
	assert.NoError(t, l.Err(), "a refused Extend leaves the lock held")
}

// TestValidityUsesWholeMilliseconds: a TTL that is not a whole number of
// milliseconds claims no more validity than the server was given.
func TestValidityUsesWholeMilliseconds(t *testing.T) {
	t0 := time.Now()
	assert.Equal(t, validUntil(t0, 10*time.Millisecond, 0), validUntil(t0, 10*time.Millisecond+999*time.Microsecond, 0))
}

// TestFenceCounterExhausted: at 2^53-1 a Lua double cannot count up by
// one; the acquisition fails with a clear error and sets nothing.
func TestFenceCounterExhausted(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	lk := newLocker(t, srv.Client(t))
	ctx := context.Background()
	const top = 1<<53 - 1
	require.NoError(t, admin.Set(ctx, "{redlock:top}:fence", top-1, 0).Err())
	l, err := lk.TryLock(ctx, "top")
	require.NoError(t, err, "TryLock() one below the top")
	assert.Equal(t, int64(top), l.Token())
	require.NoError(t, l.Unlock(ctx))

	_, err = lk.TryLock(ctx, "top")
	require.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorIs(t, err, errTokenSpace)
	assert.Zero(t, admin.Exists(ctx, "{redlock:top}").Val(), "lock key set although no token could be minted")
	_, err = lk.Lock(ctx, "top")
	assert.ErrorIs(t, err, errTokenSpace, "Lock() gives up at once: waiting cannot help")

	// Lua's tonumber reads "nan", "inf" and "1e400" as numbers: none is a
	// counter (a NaN counter would hand every owner the same token).
	for _, junk := range []string{"not-a-number", "nan", "inf", "-inf", "1e400"} {
		require.NoError(t, admin.Set(ctx, "{redlock:junk}:fence", junk, 0).Err())
		_, err = lk.TryLock(ctx, "junk")
		assert.ErrorIs(t, err, ErrNotObtained, "fence %q", junk)
		assert.Contains(t, fmt.Sprint(err), "does not hold a number", "fence %q", junk)
		assert.Zero(t, admin.Exists(ctx, "{redlock:junk}").Val(), "fence %q: lock key set", junk)
	}
}

// TestReadOnlyReplicaSaysSo: a server's refusal reaches the caller as the
// server's error, not as a timeout hidden by go-redis's retries.
func TestReadOnlyReplicaSaysSo(t *testing.T) {
	master := redistest.Start(t)
	host, port, _ := strings.Cut(master.Addr(), ":")
	replica := redistest.Start(t, "--replicaof", host, port)
	// A 3s TTL: the default node timeout (300ms) outlasts go-redis's own
	// retries of READONLY (3 retries, 8-136ms of backoff).
	cl := redis.NewClient(&redis.Options{Addr: replica.Addr()}) // go-redis's default retries
	t.Cleanup(func() { cl.Close() })
	lk := newLocker(t, cl, WithTTL(3*time.Second))
	ctx := context.Background()
	for range 5 {
		_, err := lk.TryLock(ctx, "ro")
		require.ErrorIs(t, err, ErrNotObtained)
		assert.True(t, redis.IsReadOnlyError(err), "TryLock() on a replica = %v, want READONLY", err)
		assert.NotErrorIs(t, err, errNodeTimeout)
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := lk.Lock(lctx, "ro")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, redis.IsReadOnlyError(err), "Lock() on a replica = %v, want READONLY in it", err)
}

// wrapHook wraps every error a command or pipeline returns, as a tracing
// or metrics hook might.
type wrapHook struct{}

func (wrapHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (wrapHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := next(ctx, cmd); err != nil {
			err = fmt.Errorf("traced: %w", err)
			cmd.SetErr(err)
			return err
		}
		return nil
	}
}
func (wrapHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if e := cmd.Err(); e != nil {
				cmd.SetErr(fmt.Errorf("traced: %w", e))
			}
		}
		if err != nil {
			return fmt.Errorf("traced: %w", err)
		}
		return nil
	}
}

// TestNoScriptThroughWrappingHook: after SCRIPT FLUSH, a hook that wraps
// errors must not turn NOSCRIPT into a failure or into "not held".
func TestNoScriptThroughWrappingHook(t *testing.T) {
	srv := redistest.Start(t)
	cl := srv.Client(t)
	cl.AddHook(wrapHook{})
	// Renewals every 100ms, but a 1s lease: a loaded machine that delays one
	// renewal must not lose the lock, only a renewal that fails must.
	lk := newLocker(t, cl, WithTTL(time.Second), WithRenewInterval(100*time.Millisecond))
	ctx := context.Background()
	l, err := lk.TryLock(ctx, "flush")
	require.NoError(t, err)
	for range 3 {
		srv.Do(t, "SCRIPT", "FLUSH")
		time.Sleep(150 * time.Millisecond) // the duration under test: a renewal falls in it
		require.NoError(t, l.Err(), "renewal after SCRIPT FLUSH through a wrapping hook")
	}
	srv.Do(t, "SCRIPT", "FLUSH")
	require.NoError(t, l.Extend(ctx, time.Second))
	srv.Do(t, "SCRIPT", "FLUSH")
	require.NoError(t, l.Unlock(ctx))
	srv.Do(t, "SCRIPT", "FLUSH")
	_, err = lk.TryLock(ctx, "flush")
	require.NoError(t, err)
	require.NoError(t, lk.Close(), "Close() releases through pipelines")
	assert.Zero(t, srv.Client(t).Exists(ctx, "{redlock:flush}").Val())
}

// TestTinyTTLFirstCall: a Locker warms its client up, so a first TryLock
// with a 5ms TTL is not judged by a budget a dial or a script load already
// spent: the first call dials nothing and sends no EVAL or SCRIPT LOAD, only
// the EVALSHA of the acquire script.
func TestTinyTTLFirstCall(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for i := range 5 {
		cl := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		lk, err := NewLocker(cl, WithTTL(5*time.Millisecond), WithAutoRenew(false))
		require.NoError(t, err)
		require.GreaterOrEqual(t, cl.PoolStats().IdleConns, uint32(1), "no connection dialled ahead")
		h := &firstCallHook{}
		cl.AddHook(h)
		l, err := lk.TryLock(ctx, fmt.Sprintf("tiny-%d", i))
		h.mu.Lock()
		dials, cmds := h.dials, slices.Clone(h.cmds)
		h.mu.Unlock()
		// Whether a 5ms lease (2.95ms of validity) is obtained depends on the
		// machine's load, not on the warm-up: not asserted.
		if err != nil {
			t.Logf("TryLock(5ms) = %v", err)
		} else {
			_ = l.Unlock(ctx)
		}
		assert.Zero(t, dials, "first TryLock dialled")
		require.NotEmpty(t, cmds, "first TryLock sent nothing")
		assert.Equal(t, "evalsha", cmds[0], "first TryLock's first command (all: %v)", cmds)
		assert.NotContains(t, cmds, "eval", "first TryLock fell back to EVAL: script not loaded by the warm-up")
		assert.NotContains(t, cmds, "script", "first TryLock loaded a script")
		lk.Close()
		cl.Close()
	}
	exists, err := srv.Client(t).ScriptExists(ctx, scriptAcquire.Hash(), scriptRelease.Hash()).Result()
	require.NoError(t, err)
	assert.Equal(t, []bool{true, true}, exists, "scripts not loaded by the warm-up")
}

// firstCallHook records the dials and the command names of a client.
type firstCallHook struct {
	mu    sync.Mutex
	dials int
	cmds  []string
}

func (h *firstCallHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.mu.Lock()
		h.dials++
		h.mu.Unlock()
		return next(ctx, network, addr)
	}
}

func (h *firstCallHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.cmds = append(h.cmds, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *firstCallHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRingWaits: a 2-shard Ring supports everything, waiting included.
func TestRingWaits(t *testing.T) {
	srvs := redistest.StartN(t, 2)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srvs[0].Addr(), "b": srvs[1].Addr()}})
	t.Cleanup(func() { ring.Close() })
	lk := newLocker(t, ring, WithTTL(5*time.Second))
	ctx := context.Background()
	for i := range 6 { // names on both shards
		name := fmt.Sprintf("ring-%d", i)
		l, err := lk.TryLock(ctx, name)
		require.NoError(t, err)
		got := make(chan *Lock, 1)
		go func() {
			w, err := lk.Lock(ctx, name)
			assert.NoError(t, err, "Lock() on a Ring")
			got <- w
		}()
		waiting(t, lk.c, name)
		released := time.Now()
		require.NoError(t, l.Unlock(ctx))
		w := <-got
		require.NotNil(t, w)
		// Woken by the release message, not the 5s lease or a 1s timer.
		assert.Less(t, time.Since(released), 500*time.Millisecond, "hand-off on a Ring")
		require.NoError(t, w.Unlock(ctx))
	}
	keys := 0
	for _, s := range srvs {
		keys += int(s.Client(t).DBSize(ctx).Val())
	}
	assert.Positive(t, keys)
}

// TestConcurrentUnlockAndClose: Close racing Unlock, renewal and in-flight
// grants leaves no key and no held lock behind.
func TestConcurrentUnlockAndClose(t *testing.T) {
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
		if l.io.TryLock() {
			l.io.Unlock()
			return false
		}
		return true
	}), "no renewal started")
	start := time.Now()
	require.NoError(t, lk.Close())
	assert.Less(t, time.Since(start), nodeTimeout+200*time.Millisecond, "Close() waited for an inline renewal")
	assert.ErrorIs(t, l.Err(), ErrClosed)
}

// TestNilLocker: a nil or zero Locker or Redlock returns errors, never
// panics.
func TestNilLocker(t *testing.T) {
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	for name, a := range map[string]interface {
		acquirer
		TryLock(context.Context, string, ...Option) (*Lock, error)
		Do(context.Context, string, func(context.Context) error, ...Option) error
		Close() error
	}{
		"nil Locker": (*Locker)(nil), "zero Locker": &Locker{},
		"nil Redlock": (*Redlock)(nil), "zero Redlock": &Redlock{},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := a.Lock(ctx, "x")
			assert.Error(t, err)
			_, err = a.TryLock(ctx, "x")
			assert.Error(t, err)
			assert.Error(t, a.Do(ctx, "x", fn))
			assert.NoError(t, a.Close())
		})
	}
}

// TestClientHooksSeeLockCommands: the user's hooks (tracing, metrics) see
// every lock command, on the inline and the goroutine call paths alike.
func TestClientHooksSeeLockCommands(t *testing.T) {
	srv := redistest.Start(t)
	for name, opt := range map[string]*redis.Options{
		"defaults (goroutine path)": {Addr: srv.Addr()},
		"ContextTimeoutEnabled":     {Addr: srv.Addr(), ContextTimeoutEnabled: true},
		"socket timeouts under 1s":  {Addr: srv.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			hook := &countingHook{}
			cl := redis.NewClient(opt)
			t.Cleanup(func() { cl.Close() })
			cl.AddHook(hook)
			lk := newLocker(t, cl)
			ctx := context.Background()
			before := hook.scripts.Load()
			l, err := lk.TryLock(ctx, "hooked")
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))
			assert.Equal(t, int64(2), hook.scripts.Load()-before, "scripts seen by the client's hook for TryLock+Unlock")
		})
	}
}

// timerDelay measures, until stop closes or limit passes, the worst delay
// with which a 1ms timer fires on this machine: the scheduling delay that
// any goroutine waking on a timer, the loss clock's included, suffers.
func timerDelay(stop <-chan struct{}, limit time.Duration) time.Duration {
	const tick = time.Millisecond
	var worst time.Duration
	end := time.Now().Add(limit)
	t := time.NewTimer(tick)
	defer t.Stop()
	for start := time.Now(); start.Before(end); start = time.Now() {
		t.Reset(tick)
		select {
		case <-stop:
			return worst
		case <-t.C:
			worst = max(worst, time.Since(start)-tick)
		}
	}
	return worst
}
