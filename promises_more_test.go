package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/redistest"
)

// Promises of PROMISES.md that had no test, or a test on miniredis only,
// checked against real redis-server processes.

// TestPromiseArrivalOrderAcrossProcesses: processes queued for a name get it
// in the order they arrived (DESIGN.md "Fair waiting and the hand-off"), and
// a holder that unlocks and locks again at once goes behind them. Each
// Locker has a client of its own, as a process would.
func TestPromiseArrivalOrderAcrossProcesses(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const name = "p-arrival"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	holder := newLocker(t, srv.Client(t))
	held, err := holder.TryLock(ctx, name)
	require.NoError(t, err)

	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	errs := make(chan error, 4)
	take := func(who string, lk *Locker) {
		wg.Go(func() {
			l, err := lk.Lock(ctx, name)
			if err != nil {
				errs <- fmt.Errorf("%s: Lock() = %w", who, err)
				return
			}
			// Recorded while holding: the order of the list is the order
			// of holding.
			mu.Lock()
			order = append(order, who)
			mu.Unlock()
			if err := l.Unlock(ctx); err != nil {
				errs <- fmt.Errorf("%s: Unlock() = %w", who, err)
			}
		})
	}
	for i, who := range []string{"A", "B", "C"} {
		take(who, newLocker(t, srv.Client(t)))
		// The next process arrives only once this one is in the
		// server-side queue.
		writersQueued(t, srv, name, int64(i+1))
	}
	require.NoError(t, held.Unlock(ctx))
	take("holder again", holder)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assert.Equal(t, []string{"A", "B", "C", "holder again"}, order, "order of holding")
}

// TestPromiseUnansweredWarnRateLimited: while a waiting Lock gets no answer,
// it logs at WARN at most once every 5 s (WithUnansweredLimit; README.md
// "Timeouts: pass a ctx"). Over a wait of 7 s on a killed server, with an
// attempt every 20 ms: two WARN lines, at least 5 s apart. One line would
// mean the WARN is logged once per call; more, or closer, that the limit
// does not hold. The log's own timestamps give the gap, and 2 s of the wait
// are left after the second line is due, so load on the machine cannot
// take it away.
func TestPromiseUnansweredWarnRateLimited(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	logs := &logRecords{}
	obs := &eventLog{}
	const limit = 7 * time.Second
	// One dial per connection: go-redis's own dial retries would go on
	// after the test.
	cl := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { cl.Close() })
	lk := newLocker(t, cl, WithUnansweredLimit(limit), WithRetry(ConstantRetry(20*time.Millisecond)),
		WithLogger(slog.New(logs)), WithObserver(obs))
	srv.Kill(t)
	ctx, cancel := context.WithTimeout(context.Background(), limit+10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := lk.Lock(ctx, "p-warn")
	t.Logf("Lock() returned after %v: %v", time.Since(start), err)
	require.ErrorIs(t, err, ErrUnreachable, "Lock() = %v, want it to give up after %v unanswered", err, limit)

	obs.mu.Lock()
	acquires := append([]AcquireEvent(nil), obs.acquires...)
	obs.mu.Unlock()
	require.Len(t, acquires, 1, "acquire events")
	attempts := acquires[0].Attempts
	// Many attempts went unanswered between the lines: without the rate
	// limit each would have its own.
	t.Logf("%d attempts", attempts)
	require.Greater(t, attempts, 20, "attempts in %v", limit)
	logs.mu.Lock()
	var warns []time.Time
	for _, r := range logs.recs {
		if r.Level == slog.LevelWarn && strings.Contains(r.Message, "no answer from Redis") {
			warns = append(warns, r.Time)
		}
	}
	logs.mu.Unlock()
	require.Len(t, warns, 2, "WARN lines about %d unanswered attempts in %v, want 2 (one at the first, one 5 s later): %v", attempts, limit, warns)
	assert.GreaterOrEqual(t, warns[1].Sub(warns[0]), 5*time.Second, "gap between the WARN lines")
}

// trackingConns counts the connections named redlock-tracking on srv: the
// tracking connections of Lockers on it.
func trackingConns(t testing.TB, srv *redistest.Server) int {
	t.Helper()
	list, _ := srv.Do(t, "CLIENT", "LIST").(string)
	return strings.Count(list, "name=redlock-tracking ")
}

// TestPromiseChangeInFirst50msHeard: a change made to a hold's key before
// its tracking connection exists (in the hold's first 50 ms) is found when
// the connection opens, at about 55 ms (README.md "How soon a holder hears
// of a loss"; SAFETY.md "Hearing a loss"), long before the first renewal
// (10 s). Measured from the acquisition; bounded at 1 s for a loaded
// machine.
func TestPromiseChangeInFirst50msHeard(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(ctx context.Context, cl *redis.Client, key string) error
		reason LossReason
	}{
		{"DEL", func(ctx context.Context, cl *redis.Client, key string) error { return cl.Del(ctx, key).Err() }, LossDeleted},
		{"SET of another value", func(ctx context.Context, cl *redis.Client, key string) error {
			return cl.Set(ctx, key, "someone-else", time.Minute).Err()
		}, LossTaken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			out := srv.Client(t)
			ctx := context.Background()
			// A loaded machine may take longer than 50 ms between the
			// acquisition and the change; then the connection may have
			// heard it, and the case is tried again on a fresh Locker.
			const tries = 3
			for try := 1; ; try++ {
				lk := newLocker(t, srv.Client(t), WithTTL(30*time.Second))
				start := time.Now()
				l, err := lk.TryLock(ctx, "p-first-50ms")
				require.NoError(t, err)
				require.NoError(t, tc.change(ctx, out, l.Key()))
				if n := trackingConns(t, srv); n != 0 {
					require.Less(t, try, tries, "the tracking connection was open at the change %d times in a row", tries)
					require.NoError(t, lk.Close())
					require.True(t, eventually(5*time.Second, func() bool { return trackingConns(t, srv) == 0 }), "tracking connection after Close")
					continue
				}
				select {
				case <-l.Done():
				case <-time.After(5 * time.Second):
					t.Fatalf("Done not closed 5s after a change made before the tracking connection opened (renewal at 10s)")
				}
				took := time.Since(start)
				t.Logf("heard %v after the acquisition (try %d)", took, try)
				requireLoss(t, l.Err(), tc.reason)
				assert.Less(t, took, time.Second, "a change in the first %v heard %v after the acquisition, want about 55ms", engine.ArmAfter, took)
				return
			}
		})
	}
}

// TestPromiseOperatorReleaseHeardAtOnce: an operator's Release of a held
// lock, read hold or permit, from another process, closes the holder's
// Done at once through the tracking connection (SAFETY.md "Hearing a
// loss"), far sooner than the next renewal (10 s); 1 s bounds "at once" on
// a loaded machine.
func TestPromiseOperatorReleaseHeardAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	holder := newLocker(t, srv.Client(t), WithTTL(30*time.Second))
	operator := newLocker(t, srv.Client(t))
	ctx := context.Background()
	var locks []*Lock
	for _, k := range holdKinds[:3] { // a lock, a read hold, a permit: what Release frees
		for i := range 3 {
			l, err := k.hold(ctx, holder, fmt.Sprintf("p-op-%s-%d", strings.ReplaceAll(k.name, " ", ""), i))
			require.NoError(t, err, k.name)
			locks = append(locks, l)
		}
	}
	require.True(t, eventually(5*time.Second, func() bool { return trackingSubscribers(t, srv) == 1 }), "the holder's tracking connection")
	var delays []time.Duration
	for _, l := range locks {
		at := time.Now()
		require.NoError(t, operator.Release(ctx, l.Name(), l.Owner()), "Release(%q)", l.Name())
		delays = append(delays, heardAfter(t, at, 5*time.Second, l)...)
		require.ErrorIs(t, l.Err(), ErrLost, "Err() of %q", l.Name())
	}
	t.Logf("Done closed after Release: %v", delays)
	for i, d := range delays {
		assert.Less(t, d, time.Second, "Done of %q closed %v after Release, want at once (renewal at 10s)", locks[i].Name(), d)
	}
}

// TestPromiseUntrackedChangeAtRenewal: with WithLossTracking(false), and on
// a Cluster or a Ring client, where no tracking connection is opened, an
// outside DEL of a held key is found at the next renewal: within one renew
// interval (WithLossTracking; SAFETY.md "Hearing a loss", last row). The
// DEL comes right after a renewal, the worst case; the bound leaves 450 ms
// for a late timer and the renewal's round trip on a loaded machine, and
// stays below the renewal after next.
func TestPromiseUntrackedChangeAtRenewal(t *testing.T) {
	t.Parallel()
	const renew = 500 * time.Millisecond
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) (Client, *redistest.Server, []Option)
	}{
		{"WithLossTracking(false)", func(t *testing.T) (Client, *redistest.Server, []Option) {
			srv := redistest.Start(t)
			return srv.Client(t), srv, []Option{WithLossTracking(false)}
		}},
		{"Cluster client", func(t *testing.T) (Client, *redistest.Server, []Option) {
			srv := redistest.Start(t, "--cluster-enabled", "yes")
			srv.Do(t, "CLUSTER", "ADDSLOTSRANGE", "0", "16383")
			require.True(t, eventuallyEvery(10*time.Second, 50*time.Millisecond, func() bool {
				return strings.Contains(fmt.Sprint(srv.Do(t, "CLUSTER", "INFO")), "cluster_state:ok")
			}), "cluster state")
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}, MaxRedirects: -1})
			t.Cleanup(func() { c.Close() })
			return c, srv, nil
		}},
		{"Ring client", func(t *testing.T) (Client, *redistest.Server, []Option) {
			srv := redistest.Start(t)
			r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}})
			t.Cleanup(func() { r.Close() })
			return r, srv, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cl, srv, opts := tc.setup(t)
			lk := newLocker(t, cl, append(opts, WithTTL(5*time.Second), WithRenewInterval(renew))...)
			ctx := context.Background()
			out := srv.Client(t)
			require.NoError(t, out.Ping(ctx).Err())
			l, err := lk.TryLock(ctx, "p-untracked")
			require.NoError(t, err)
			// Right after a renewal, the worst case: the next comes one
			// interval later. By then a tracking connection would be open
			// (ArmAfter).
			first := l.Until()
			require.True(t, eventually(5*time.Second, func() bool { return l.Until().After(first) }), "no renewal")
			at := time.Now()
			require.EqualValues(t, 1, out.Del(ctx, l.Key()).Val(), "DEL of the held key")
			heard := heardAfter(t, at, 5*time.Second, l)
			t.Logf("heard %v after the DEL", heard)
			requireLoss(t, l.Err(), LossDeleted)
			assert.Less(t, heard[0], 2*renew-50*time.Millisecond, "the DEL heard %v after, want within one renew interval (%v)", heard[0], renew)
			assert.Zero(t, trackingConns(t, srv), "tracking connections")
		})
	}
}

// finalReadSeen is a client hook that tells when a call's reply contained
// a given string (the last value proclaimed) and when a call started after
// that: the observer reads the leader after each message, one read at a
// time, so a read starting after the read that saw the last value means
// the observer is done sending what that read found.
type finalReadSeen struct {
	want  atomic.Pointer[string]
	seen  atomic.Bool // a reply contained *want
	after atomic.Bool // a call started after that
}

func (h *finalReadSeen) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *finalReadSeen) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.seen.Load() {
			h.after.Store(true)
		}
		err := next(ctx, cmd)
		if w := h.want.Load(); w != nil && err == nil && strings.Contains(cmd.String(), *w) {
			h.seen.Store(true)
		}
		return err
	}
}

func (h *finalReadSeen) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestPromiseObserveSlowReaderKeepsLatest: a reader of Observe that falls
// more than 16 changes behind loses the oldest changes, never the latest
// (Election.Observe; README.md "Leader election"): after 40 Proclaims
// unread, the channel holds exactly the last 16 values, in order. Each
// Proclaim waits until the observer has read the value before it (the
// reader of the channel is the slow one, not the observer).
func TestPromiseObserveSlowReaderKeepsLatest(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const name, changes = "p-observe-slow", 40
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	value := func(i int) string { return fmt.Sprintf("<value-%02d>", i) }

	hook := &finalReadSeen{}
	obsCl := srv.Client(t)
	obsCl.AddHook(hook)
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	ch := newLocker(t, obsCl).Election(name).Observe(octx)

	e := newLocker(t, srv.Client(t)).Election(name)
	leader, err := e.Campaign(ctx, value(0))
	require.NoError(t, err)
	defer leader.Unlock(context.Background())
	select {
	case l := <-ch:
		require.Equal(t, value(0), l.Value, "first leader observed")
	case <-ctx.Done():
		t.Fatal("Observe sent no leader")
	}

	// From here on nobody reads ch.
	for i := 1; i <= changes; i++ {
		v := value(i)
		hook.seen.Store(false)
		hook.want.Store(&v)
		require.NoError(t, e.Proclaim(ctx, leader, v))
		require.True(t, eventually(5*time.Second, hook.seen.Load), "the observer never read %s", v)
	}
	// The observer is done with the read that found the last value once it
	// starts another; a Proclaim of the same value makes it read again
	// without a change to send.
	hook.after.Store(false)
	require.NoError(t, e.Proclaim(ctx, leader, value(changes)))
	require.True(t, eventually(5*time.Second, hook.after.Load), "the observer never read again")

	var got []string
	for range cap(ch) + 1 { // bounded: the channel holds at most cap(ch)
		select {
		case l := <-ch:
			got = append(got, l.Value)
			continue
		default:
		}
		break
	}
	var want []string
	for i := changes - observeBuffer + 1; i <= changes; i++ {
		want = append(want, value(i))
	}
	assert.Equal(t, want, got, "what a reader %d changes behind finds: the last %d, the latest last", changes, observeBuffer)
}

// TestPromiseWaitFIFORealServer: within a Locker, waiters queue in FIFO
// order: a goroutine that unlocks and locks again at once goes behind the
// goroutine already waiting (DESIGN.md "Fair waiting and the hand-off";
// TestWaitFIFO on miniredis).
func TestPromiseWaitFIFORealServer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := lk.TryLock(ctx, "p-fifo")
	require.NoError(t, err)
	var (
		mu     sync.Mutex
		order  []string
		tokens = []int64{a.Token()}
	)
	record := func(who string, l *Lock) {
		mu.Lock()
		order = append(order, who)
		tokens = append(tokens, l.Token())
		mu.Unlock()
	}
	bErr := make(chan error, 1)
	go func() {
		b, err := lk.Lock(ctx, "p-fifo")
		if err != nil {
			bErr <- err
			return
		}
		record("B", b)
		bErr <- b.Unlock(ctx)
	}()
	waiting(t, lk.c, "p-fifo")
	require.NoError(t, a.Unlock(ctx))
	a2, err := lk.Lock(ctx, "p-fifo")
	require.NoError(t, err, "A's Lock() again")
	record("A", a2)
	require.NoError(t, a2.Unlock(ctx))
	require.NoError(t, <-bErr, "B")
	assert.Equal(t, []string{"B", "A"}, order, "holders after A's release: B was waiting already")
	assert.IsIncreasing(t, tokens, "tokens of A, then of the holders after it")
}

// TestPromiseConcurrentUnlockRealServer: of several concurrent Unlock calls
// on one lock exactly one returns nil, the others ErrNotHeld, and the key
// is gone (Lock type doc; TestConcurrentUnlock on miniredis). Repeated on
// 20 locks for more interleavings.
func TestPromiseConcurrentUnlockRealServer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t))
	ctx := context.Background()
	for i := range 20 {
		l, err := lk.TryLock(ctx, fmt.Sprintf("p-unlock-%d", i))
		require.NoError(t, err)
		var wg sync.WaitGroup
		results := make(chan error, 8)
		for range 8 {
			wg.Go(func() { results <- l.Unlock(ctx) })
		}
		wg.Wait()
		close(results)
		nils := 0
		for err := range results {
			if err == nil {
				nils++
			} else {
				assert.ErrorIs(t, err, ErrNotHeld, "Unlock() = %v, want nil or ErrNotHeld", err)
			}
		}
		require.Equal(t, 1, nils, "Unlock calls of %q that returned nil", l.Name())
		assert.EqualValues(t, 0, srv.Do(t, "EXISTS", l.Key()), "key of %q after Unlock", l.Name())
		assert.ErrorIs(t, l.Err(), ErrReleased)
	}
}

// TestPromiseDoPanicReleasesRealServer: Do releases the lock when fn
// panics, before the panic goes on (Locker.Do; TestDoPanicReleases on
// miniredis).
func TestPromiseDoPanicReleasesRealServer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t), WithTTL(30*time.Second))
	var held *Lock
	func() {
		defer func() {
			p := recover()
			require.Equal(t, "boom", p, "recover(): the panic goes on after the release")
			require.NotNil(t, held)
			// The panic reaches the caller only after the release ran.
			assert.EqualValues(t, 0, srv.Do(t, "EXISTS", held.Key()), "key when the panic reached the caller")
			assert.ErrorIs(t, held.Err(), ErrReleased)
		}()
		_ = lk.Do(context.Background(), "p-panics", func(ctx context.Context) error {
			held, _ = FromContext(ctx)
			panic("boom")
		})
	}()
	l, err := newLocker(t, srv.Client(t)).TryLock(context.Background(), "p-panics")
	require.NoError(t, err, "another process after the panic")
	require.NoError(t, l.Unlock(context.Background()))
}

// TestPromiseDoCancelledByUnlockRealServer: an Unlock through FromContext
// cancels Do's ctx (cause ErrReleased), and Do then returns fn's result,
// not ErrLost (Locker.Do; TestDoCancelledByUnlockThroughContext on
// miniredis).
func TestPromiseDoCancelledByUnlockRealServer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t), WithTTL(30*time.Second))
	errFn := errors.New("fn's own error")
	for _, result := range []error{nil, errFn} {
		t.Run(fmt.Sprint(result), func(t *testing.T) {
			var key string
			err := lk.Do(context.Background(), "p-self", func(ctx context.Context) error {
				l, ok := FromContext(ctx)
				require.True(t, ok, "FromContext")
				key = l.Key()
				require.NoError(t, l.Unlock(ctx))
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Second):
					t.Error("Do's ctx not cancelled 5s after the Unlock")
					return result
				}
				assert.ErrorIs(t, context.Cause(ctx), ErrReleased, "cause")
				return result
			})
			if result == nil {
				assert.NoError(t, err, "Do()")
			} else {
				assert.ErrorIs(t, err, errFn, "Do()")
				assert.NotErrorIs(t, err, ErrLost, "Do()")
			}
			assert.EqualValues(t, 0, srv.Do(t, "EXISTS", key), "key after Do")
		})
	}
}
