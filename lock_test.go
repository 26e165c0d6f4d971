package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/internal/scripts"
)

func TestNewLockerBadInput(t *testing.T) {
	t.Parallel()
	cl, _ := miniClient(t)
	var nilClient *redis.Client
	tests := []struct {
		name   string
		client Client
		opts   []Option
	}{
		{"nil client", nil, nil},
		{"typed nil client", nilClient, nil},
		{"zero TTL", cl, []Option{WithTTL(0)}},
		{"negative TTL", cl, []Option{WithTTL(-time.Second)}},
		{"TTL within drift", cl, []Option{WithTTL(2 * time.Millisecond)}},
		{"renew interval = TTL", cl, []Option{WithTTL(time.Second), WithRenewInterval(time.Second)}},
		{"renew interval > TTL", cl, []Option{WithTTL(time.Second), WithRenewInterval(2 * time.Second)}},
		{"negative renew interval", cl, []Option{WithRenewInterval(-1)}},
		{"negative node timeout", cl, []Option{WithNodeTimeout(-1)}},
		{"drift factor 0.5", cl, []Option{WithDriftFactor(0.5)}},
		{"negative drift factor", cl, []Option{WithDriftFactor(-0.1)}},
		{"empty prefix", cl, []Option{WithKeyPrefix("")}},
		{"prefix with brace", cl, []Option{WithKeyPrefix("a{b}:")}},
		{"nil retry", cl, []Option{WithRetry(nil)}},
		{"nil option", cl, []Option{nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lk, err := NewLocker(tt.client, tt.opts...)
			if err == nil {
				lk.Close()
				t.Fatalf("NewLocker() = nil error, want one")
			}
		})
	}
}

func TestLockBadInput(t *testing.T) {
	t.Parallel()
	cl, mr := miniClient(t)
	lk := newLocker(t, cl)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		lock string
		opts []Option
		want error // nil: any error
	}{
		{"empty name", context.Background(), "", nil, nil},
		{"zero TTL", context.Background(), "x", []Option{WithTTL(0)}, nil},
		{"renew not below TTL", context.Background(), "x", []Option{WithTTL(time.Second), WithRenewInterval(time.Second)}, nil},
		{"cancelled ctx", cancelled, "x", nil, context.Canceled},
	}
	for _, tt := range tests {
		for _, try := range []bool{false, true} {
			acquire := lk.Lock
			if try {
				acquire = lk.TryLock
			}
			l, err := acquire(tt.ctx, tt.lock, tt.opts...)
			if err == nil {
				t.Fatalf("%s: Lock() = %v, nil error; want an error", tt.name, l)
			}
			if tt.want != nil && (!errors.Is(err, tt.want) || !errors.Is(err, ErrNotObtained)) {
				t.Errorf("%s: Lock() = %v, want ErrNotObtained and %v", tt.name, err, tt.want)
			}
		}
		if err := lk.Do(tt.ctx, tt.lock, func(context.Context) error { return nil }, tt.opts...); err == nil {
			t.Errorf("%s: Do() = nil, want an error", tt.name)
		}
	}
	if keys := mr.Keys(); len(keys) != 0 {
		t.Errorf("keys after bad input = %v, want none", keys)
	}
	if err := lk.Do(context.Background(), "x", nil); err == nil {
		t.Errorf("Do(nil fn) = nil, want an error")
	}
}

// TestLockerBasics runs the single-instance semantics on miniredis and on a
// real redis-server.
func TestLockerBasics(t *testing.T) {
	t.Parallel()
	t.Run("miniredis", func(t *testing.T) {
		cl, _ := miniClient(t)
		testLockerBasics(t, cl)
	})
	t.Run("redis-server", func(t *testing.T) {
		testLockerBasics(t, redistest.Start(t).Client(t))
	})
	t.Run("redis-server, client enforces ctx deadlines", func(t *testing.T) {
		testLockerBasics(t, deadlineClient(t, redistest.Start(t)))
	})
}

func testLockerBasics(t *testing.T, cl *redis.Client) {
	ctx := context.Background()
	lk := newLocker(t, cl, WithAutoRenew(false))

	a, err := lk.TryLock(ctx, "basics")
	if err != nil {
		t.Fatalf("TryLock() = %v", err)
	}
	if a.Name() != "basics" || a.Token() < 1 || len(a.Owner()) != 36 {
		t.Errorf("lock = %q token %d owner %q, want name basics, token >= 1, a UUID", a.Name(), a.Token(), a.Owner())
	}
	if got := get(t, cl, "{redlock:basics}"); got != a.Owner() {
		t.Errorf("lock key = %q, want owner %q", got, a.Owner())
	}
	if got := get(t, cl, "{redlock:basics}:fence"); got != strconv.FormatInt(a.Token(), 10) {
		t.Errorf("fence counter = %q, want %d", got, a.Token())
	}
	if left := time.Until(a.Until()); left <= 9*time.Second || left > 10*time.Second-102*time.Millisecond {
		t.Errorf("Until() - now = %v, want just under 10s - drift (9.898s)", left)
	}
	if !containsMonotonic(a.Until()) {
		t.Errorf("Until() = %v, want a monotonic reading", a.Until())
	}

	if _, err := lk.TryLock(ctx, "basics"); !errors.Is(err, ErrNotObtained) {
		t.Errorf("TryLock(held) = %v, want ErrNotObtained", err)
	}
	var ne *NodeError
	if _, err := lk.TryLock(ctx, "basics"); !errors.As(err, &ne) || !errors.Is(ne, node.ErrTaken) {
		t.Errorf("TryLock(held) = %v, want a NodeError saying held by another owner", err)
	}

	if err := a.Extend(ctx, 20*time.Second); err != nil {
		t.Fatalf("Extend() = %v", err)
	}
	if pttl := cl.PTTL(ctx, "{redlock:basics}").Val(); pttl <= 10*time.Second {
		t.Errorf("PTTL after Extend(20s) = %v, want > 10s", pttl)
	}
	if left := time.Until(a.Until()); left <= 19*time.Second {
		t.Errorf("Until() after Extend(20s) = now + %v, want > 19s", left)
	}

	if err := a.Err(); err != nil {
		t.Errorf("Err() while held = %v, want nil", err)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}
	select {
	case <-a.Done():
	default:
		t.Errorf("Done() open after Unlock")
	}
	if err := a.Err(); !errors.Is(err, ErrReleased) {
		t.Errorf("Err() after Unlock = %v, want ErrReleased", err)
	}
	if err := a.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("second Unlock() = %v, want ErrNotHeld", err)
	}
	if err := a.Extend(ctx, time.Second); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Extend() after Unlock = %v, want ErrNotHeld", err)
	}
	if n := cl.Exists(ctx, "{redlock:basics}").Val(); n != 0 {
		t.Errorf("EXISTS after Unlock = %d, want 0", n)
	}

	b, err := lk.Lock(ctx, "basics")
	if err != nil {
		t.Fatalf("Lock() after Unlock = %v", err)
	}
	if b.Token() <= a.Token() || b.Owner() == a.Owner() {
		t.Errorf("second lock token %d owner %s, want > %d and a new owner", b.Token(), b.Owner(), a.Token())
	}

	// Fencing off: no counter, token 0.
	c, err := lk.TryLock(ctx, "nofence", WithFencing(false))
	if err != nil {
		t.Fatalf("TryLock(WithFencing(false)) = %v", err)
	}
	if c.Token() != 0 || cl.Exists(ctx, "{redlock:nofence}:fence").Val() != 0 {
		t.Errorf("fencing off: token %d, counter exists %d; want 0, 0", c.Token(), cl.Exists(ctx, "{redlock:nofence}:fence").Val())
	}
}

// TestMutualExclusion increments a shared Redis key with a non-atomic
// GET/SET inside the lock: any overlap of two holders loses an update.
func TestMutualExclusion(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	lk := newLocker(t, cl, WithTTL(2*time.Second), WithRetry(ConstantRetry(time.Millisecond)))
	hammer(t, lk, cl, "counter", "me:counter", 8, 250)
}

// TestExpiryTakeover: A's lease runs out (no renewal), B takes the name, and
// A's stale handle can neither release nor extend B's lock.
func TestExpiryTakeover(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	lk := newLocker(t, cl, WithAutoRenew(false), WithRetry(ConstantRetry(5*time.Millisecond)))
	ctx := context.Background()

	a, err := lk.TryLock(ctx, "takeover", WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatalf("TryLock(A) = %v", err)
	}
	<-a.Done() // closes by A.Until, before the server may grant anyone else
	doneAt := time.Now()
	// The loss lead, plus what a batch of one may add.
	lead := engine.TimerLead + engine.Drift(300*time.Millisecond, 0.01)/2 + time.Millisecond
	if early := a.Until().Sub(doneAt); early > lead {
		t.Errorf("Done closed %v before Until, want at most the %v loss lead", early, lead)
	}
	if err := a.Err(); !errors.Is(err, ErrLost) {
		t.Errorf("A.Err() after expiry = %v, want ErrLost", err)
	}
	b, err := lk.Lock(ctx, "takeover", WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("Lock(B) = %v", err)
	}
	if b.Token() <= a.Token() {
		t.Errorf("B token %d, want > A token %d", b.Token(), a.Token())
	}
	if err := a.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("A.Unlock() = %v, want ErrNotHeld", err)
	}
	if err := a.Extend(ctx, time.Second); !errors.Is(err, ErrNotHeld) {
		t.Errorf("A.Extend() = %v, want ErrNotHeld", err)
	}
	if got := get(t, cl, "{redlock:takeover}"); got != b.Owner() {
		t.Errorf("lock key = %q, want B's owner %q intact", got, b.Owner())
	}
	if pttl := cl.PTTL(ctx, "{redlock:takeover}").Val(); pttl < 9*time.Second {
		t.Errorf("PTTL of B's key = %v, want B's lease untouched (~10s)", pttl)
	}
}

// TestExtendNeverResurrects: the key is gone (expired or deleted); Extend
// must not re-create it.
func TestExtendNeverResurrects(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	lk := newLocker(t, cl, WithAutoRenew(false))
	ctx := context.Background()
	a, err := lk.TryLock(ctx, "gone")
	if err != nil {
		t.Fatalf("TryLock() = %v", err)
	}
	cl.Del(ctx, "{redlock:gone}")
	if err := a.Extend(ctx, time.Second); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Extend() of deleted key = %v, want ErrNotHeld", err)
	}
	if n := cl.Exists(ctx, "{redlock:gone}").Val(); n != 0 {
		t.Errorf("EXISTS after Extend = %d, want 0 (not re-created)", n)
	}
	if err := a.Err(); !errors.Is(err, ErrLost) {
		t.Errorf("Err() after failed Extend = %v, want ErrLost", err)
	}
}

// TestTokensMonotonic: tokens strictly increase across release, expiry,
// SCRIPT FLUSH and a restart that loses every key, counter included.
func TestTokensMonotonic(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	lk := newLocker(t, cl, WithAutoRenew(false), WithRetry(ConstantRetry(5*time.Millisecond)))
	ctx := context.Background()
	last := int64(0)
	take := func(step string, opts ...Option) *Lock {
		t.Helper()
		l, err := lk.Lock(ctx, "tok", opts...)
		if err != nil {
			t.Fatalf("%s: Lock() = %v", step, err)
		}
		if l.Token() <= last {
			t.Fatalf("%s: token %d, want > %d", step, l.Token(), last)
		}
		last = l.Token()
		return l
	}
	for range 20 {
		if err := take("release cycle").Unlock(ctx); err != nil {
			t.Fatalf("Unlock() = %v", err)
		}
	}
	for range 3 {
		l := take("expiry cycle", WithTTL(50*time.Millisecond))
		<-l.Done()
	}
	srv.Do(t, "SCRIPT", "FLUSH")
	if err := take("after SCRIPT FLUSH").Unlock(ctx); err != nil {
		t.Fatalf("Unlock() after SCRIPT FLUSH = %v", err)
	}
	held := take("before restart")
	srv.Restart(t)
	if n := cl.Exists(ctx, "{redlock:tok}", "{redlock:tok}:fence").Val(); n != 0 {
		t.Fatalf("keys after restart = %d, want 0 (restarted empty)", n)
	}
	// The server lost the lock and the counter: a second holder gets in while
	// the first still believes it holds. The token must still tell them apart.
	after := take("after empty restart")
	if after.Token() <= held.Token() {
		t.Errorf("token after empty restart %d, want > %d of the holder before it", after.Token(), held.Token())
	}
}

func TestLockContextEnd(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	lk := newLocker(t, cl)
	ctx := context.Background()
	holder, err := lk.TryLock(ctx, "busy")
	if err != nil {
		t.Fatalf("TryLock() = %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = lk.Lock(wctx, "busy")
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock(ctx that ends) = %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Lock returned %v after start, want soon after the 100ms deadline", d)
	}
	if got := get(t, cl, "{redlock:busy}"); got != holder.Owner() {
		t.Errorf("lock key = %q, want only the holder's %q", got, holder.Owner())
	}

	// Unlock with a cancelled ctx still releases.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if err := holder.Unlock(cctx); err != nil {
		t.Errorf("Unlock(cancelled ctx) = %v, want nil", err)
	}
	if n := cl.Exists(ctx, "{redlock:busy}").Val(); n != 0 {
		t.Errorf("EXISTS after Unlock(cancelled) = %d, want 0", n)
	}
}

func TestConcurrentUnlock(t *testing.T) {
	t.Parallel()
	cl, _ := miniClient(t)
	lk := newLocker(t, cl)
	l, err := lk.TryLock(context.Background(), "once")
	if err != nil {
		t.Fatalf("TryLock() = %v", err)
	}
	var wg sync.WaitGroup
	results := make(chan error, 10)
	for range 10 {
		wg.Go(func() { results <- l.Unlock(context.Background()) })
	}
	wg.Wait()
	close(results)
	nils := 0
	for err := range results {
		switch {
		case err == nil:
			nils++
		case !errors.Is(err, ErrNotHeld):
			t.Errorf("Unlock() = %v, want nil or ErrNotHeld", err)
		}
	}
	if nils != 1 {
		t.Errorf("%d Unlock calls returned nil, want exactly 1", nils)
	}
}

// TestWaitingLockPausedServer: a Lock waiting for a held name whose server
// hangs returns at its ctx's end plus the node timeout, on a client with
// go-redis's defaults (3s read timeout, 3 retries): the withdrawal of its
// place in the queue of waiting writers, made before Lock returns, is
// bounded like every other call.
func TestWaitingLockPausedServer(t *testing.T) {
	t.Parallel()
	const nodeTimeout, wait = 200 * time.Millisecond, 1500 * time.Millisecond
	srv := redistest.Start(t)
	holder := newLocker(t, srv.Client(t))
	cl := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { cl.Close() })
	waiter := newLocker(t, cl, WithNodeTimeout(nodeTimeout))
	ctx := context.Background()
	_, err := holder.TryLock(ctx, "paused-waiter")
	require.NoError(t, err)

	type result struct {
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	start := time.Now()
	go func() {
		_, err := waiter.Lock(wctx, "paused-waiter")
		done <- result{err, time.Since(start)}
	}()
	waiting(t, waiter.c, "paused-waiter")
	writersQueued(t, srv, "paused-waiter", 1)
	srv.Pause(t)
	r := <-done
	srv.Resume(t)
	assert.ErrorIs(t, r.err, ErrNotObtained)
	assert.ErrorIs(t, r.err, context.DeadlineExceeded)
	// Wrong: the client's 3s read timeout, and its retries, after the ctx's
	// end (6.5s measured before the fix).
	assert.Less(t, r.took, wait+nodeTimeout+time.Second, "Lock() returned %v after its start (ctx %v, node timeout %v)", r.took, wait, nodeTimeout)
}

// TestPausedServer: every call is bounded by the library, not by go-redis's
// read timeout, and the late grant of a paused server is cleaned up.
func TestPausedServer(t *testing.T) {
	t.Parallel()
	t.Run("library bounds the call", func(t *testing.T) {
		srv := redistest.Start(t)
		testPausedServer(t, srv, srv.Client(t))
	})
	t.Run("client enforces ctx deadlines", func(t *testing.T) {
		srv := redistest.Start(t)
		testPausedServer(t, srv, deadlineClient(t, srv))
	})
	// The acquisition and its WAIT go as one pipeline, not as a script
	// alone: the pipeline must be bounded the same way.
	t.Run("library bounds the call, WithReplicaAcks", func(t *testing.T) {
		srv := redistest.Start(t)
		testPausedServer(t, srv, srv.Client(t), WithReplicaAcks(1, 50*time.Millisecond))
	})
}

// TestFullPoolBounded: on a client whose socket timeouts are within the node
// timeout (the library calls it inline), a call that finds the pool's only
// connection busy waits for it no longer than the node timeout, not the
// client's PoolTimeout.
func TestFullPoolBounded(t *testing.T) {
	t.Parallel()
	const nodeTimeout = 300 * time.Millisecond
	srv := redistest.Start(t)
	cl := redis.NewClient(&redis.Options{
		Addr:         srv.Addr(),
		PoolSize:     1,
		DialTimeout:  200 * time.Millisecond,
		ReadTimeout:  200 * time.Millisecond,
		WriteTimeout: 200 * time.Millisecond,
		PoolTimeout:  5 * time.Second,
		MaxRetries:   -1,
	})
	t.Cleanup(func() { cl.Close() })
	lk := newLocker(t, cl, WithNodeTimeout(nodeTimeout), WithAutoRenew(false))
	ctx := context.Background()

	// BLPOP holds the pool's one connection for 3s (go-redis extends the
	// read deadline of a blocking command by its own timeout).
	busy := make(chan error, 1)
	go func() { busy <- cl.BLPop(ctx, 3*time.Second, "{redlock-test}:never").Err() }()
	require.Eventually(t, func() bool { return cl.PoolStats().IdleConns == 0 && cl.PoolStats().TotalConns == 1 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool {
		return strings.Contains(srv.Info(t, "clients"), "blocked_clients:1")
	}, 5*time.Second, time.Millisecond, "BLPOP not blocked on the server")

	start := time.Now()
	_, err := lk.TryLock(ctx, "full-pool")
	took := time.Since(start)
	assert.ErrorIs(t, err, ErrNotObtained)
	assert.Less(t, took, 2*time.Second, "TryLock() waited %v for a connection, want about the node timeout (%v), not PoolTimeout (5s)", took, nodeTimeout)
	assert.ErrorIs(t, <-busy, redis.Nil, "BLPOP")
}

func testPausedServer(t *testing.T, srv *redistest.Server, cl *redis.Client, opts ...Option) {
	const nodeTimeout = 100 * time.Millisecond
	lk := newLocker(t, cl, append([]Option{WithNodeTimeout(nodeTimeout), WithTTL(2 * time.Second)}, opts...)...)
	ctx := context.Background()

	srv.Pause(t)
	start := time.Now()
	_, err := lk.TryLock(ctx, "paused")
	took := time.Since(start)
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, node.ErrTimeout) {
		t.Errorf("TryLock(paused) = %v, want ErrNotObtained with a node timeout", err)
	}
	// Bound: the node timeout plus scheduling slack (a loaded machine's);
	// wrong would be the client's own read timeout, 1s or more. The cleanup
	// release to the silent node is not waited for: it would not answer any
	// sooner.
	if took > nodeTimeout+500*time.Millisecond {
		t.Errorf("TryLock(paused) took %v, want <= node timeout %v + slack", took, nodeTimeout)
	}
	srv.Resume(t)
	// The queued SET NX runs after the pause; the attempt's own goroutine
	// releases it when the grant arrives. Close waits for that goroutine, so
	// afterwards the key must be gone.
	if err := lk.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if n := cl.Exists(ctx, "{redlock:paused}").Val(); n != 0 {
		t.Errorf("late grant of the paused server still present after Close; want it released")
	}
	lk = newLocker(t, cl)
	l, err := lk.TryLock(ctx, "paused")
	if err != nil {
		t.Fatalf("TryLock() after resume = %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}

// TestLockerOnCluster: lock and counter keys share a hash tag whatever braces
// the name has, so every script runs on Cluster without CROSSSLOT; waiting
// (pub/sub) and the watchdog's pipelines work through a ClusterClient.
func TestLockerOnCluster(t *testing.T) {
	t.Parallel()
	cl := startCluster(t)
	lk := newLocker(t, cl, WithTTL(600*time.Millisecond), WithRenewInterval(100*time.Millisecond))
	ctx := context.Background()
	for _, name := range []string{"}x", "{}", "a{b}c", "{", "}", "plain", "user:{7}"} {
		l, err := lk.TryLock(ctx, name)
		if err != nil {
			t.Fatalf("TryLock(%q) = %v", name, err)
		}
		if err := l.Extend(ctx, time.Second); err != nil {
			t.Fatalf("Extend(%q) = %v", name, err)
		}
		got := make(chan error, 1)
		go func() {
			w, err := lk.Lock(ctx, name)
			if err == nil {
				err = w.Unlock(ctx)
			}
			got <- err
		}()
		waiting(t, lk.c, name)
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock(%q) = %v", name, err)
		}
		if err := <-got; err != nil {
			t.Fatalf("waiter on %q: %v", name, err)
		}
	}
	held, err := lk.TryLock(ctx, "renewed-on-cluster")
	if err != nil {
		t.Fatalf("TryLock() = %v", err)
	}
	time.Sleep(1200 * time.Millisecond) // two TTLs: the duration under test
	if err := held.Err(); err != nil || !time.Now().Before(held.Until()) {
		t.Errorf("lock on cluster after 2 TTLs: Err() = %v, Until in %v; want renewed", err, time.Until(held.Until()))
	}
}

// TestLockClosedClient: Lock gives up at once on a closed client instead of
// retrying until its ctx ends.
func TestLockClosedClient(t *testing.T) {
	t.Parallel()
	mr := redistest.Start(t)
	cl := mr.Client(t)
	lk := newLocker(t, cl)
	cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := lk.Lock(ctx, "closed-client")
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, redis.ErrClosed) || ctx.Err() != nil {
		t.Errorf("Lock(closed client) = %v (ctx %v), want ErrNotObtained and redis.ErrClosed before the ctx ends", err, ctx.Err())
	}
}

// TestUnlockServerPaused: Redis stops answering during Unlock. Unlock
// returns within the node timeout with an error that is neither nil nor
// ErrNotHeld (the outcome is unknown), Done is closed, and the key is gone
// once the server resumes (the queued release runs) or expires.
func TestUnlockServerPaused(t *testing.T) {
	srv := redistest.Start(t)
	cl := srv.Client(t)
	const nodeTimeout = 100 * time.Millisecond
	lk := newLocker(t, cl, WithNodeTimeout(nodeTimeout), WithTTL(2*time.Second))
	ctx := context.Background()
	l, err := lk.TryLock(ctx, "unlock-paused")
	if err != nil {
		t.Fatalf("TryLock() = %v", err)
	}
	srv.Pause(t)
	start := time.Now()
	err = l.Unlock(ctx)
	took := time.Since(start)
	srv.Resume(t)
	if err == nil || errors.Is(err, ErrNotHeld) || !errors.Is(err, node.ErrTimeout) {
		t.Errorf("Unlock(paused) = %v, want a node-timeout error, not nil or ErrNotHeld", err)
	}
	if took > nodeTimeout+100*time.Millisecond {
		t.Errorf("Unlock(paused) took %v, want <= node timeout %v + slack", took, nodeTimeout)
	}
	select {
	case <-l.Done():
	default:
		t.Errorf("Done open after Unlock")
	}
	if err := l.Err(); !errors.Is(err, ErrReleased) {
		t.Errorf("Err() = %v, want ErrReleased", err)
	}
	// Close waits for the release still in flight to the resumed server.
	lk.Close()
	if n := cl.Exists(ctx, "{redlock:unlock-paused}").Val(); n != 0 {
		t.Errorf("key after the resumed server ran the release = %d, want 0", n)
	}
}

// TestNilLock: the methods of a nil *Lock report "not held" instead of
// panicking.
func TestNilLock(t *testing.T) {
	t.Parallel()
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

// TestLockTTLAndValid: the server's view of a held, extended, stolen lock.
func TestLockTTLAndValid(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	ctx := context.Background()
	lk := newLocker(t, cl, WithAutoRenew(false), WithTTL(5*time.Second))
	l, err := lk.TryLock(ctx, "ttl")
	require.NoError(t, err)
	assert.Equal(t, "{redlock:ttl}", l.Key())
	d, err := l.TTL(ctx)
	require.NoError(t, err)
	assert.Greater(t, d, 3*time.Second)
	assert.LessOrEqual(t, d, 5*time.Second)
	ok, err := l.Valid(ctx)
	require.NoError(t, err)
	assert.True(t, ok)

	require.NoError(t, l.Extend(ctx, 20*time.Second))
	d, err = l.TTL(ctx)
	require.NoError(t, err)
	assert.Greater(t, d, 15*time.Second)

	require.NoError(t, cl.Set(ctx, l.Key(), "thief", time.Minute).Err())
	_, err = l.TTL(ctx)
	require.ErrorIs(t, err, ErrNotHeld)
	ok, err = l.Valid(ctx)
	require.NoError(t, err)
	assert.False(t, ok)

	var nl *Lock
	_, err = nl.TTL(ctx)
	assert.ErrorIs(t, err, ErrNotHeld)
	ok, _ = nl.Valid(ctx)
	assert.False(t, ok)
}

// TestErrExactAtUntil: Err reports the loss the moment Until passes, with
// or without the loss clock having fired, and Done closes with it.
func TestErrExactAtUntil(t *testing.T) {
	t.Parallel()
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
		requireLostAfterUntil(t, l)
	}
}

// TestExtendBelowRenewInterval: Extend to a TTL shorter than the renew
// interval keeps the lock held on a healthy server.
func TestExtendBelowRenewInterval(t *testing.T) {
	t.Parallel()
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

// TestValidNeverAfterUntil: once Until has passed without a renewal, Valid
// reports false even though the server still holds the lock's owner value
// (Lock.Valid's doc, lock.go: "never true after Until"). The key's lease is
// stretched to a minute by hand so that only the local clock says the lock
// is over; without the tracking connection that change goes unheard.
func TestValidNeverAfterUntil(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	lk := newLocker(t, srv.Client(t), WithAutoRenew(false), WithTTL(300*time.Millisecond), WithLossTracking(false))
	l, err := lk.TryLock(ctx, "valid-until")
	require.NoError(t, err)
	stretched, err := admin.PExpire(ctx, l.Key(), time.Minute).Result()
	require.NoError(t, err)
	require.True(t, stretched, "PEXPIRE %s", l.Key())

	// Waiting for the clock, not for our code: Until is at most 300ms away.
	for i := 0; i < 100 && time.Now().Before(l.Until()); i++ {
		time.Sleep(time.Until(l.Until()))
	}
	require.False(t, time.Now().Before(l.Until()), "Until() still ahead")
	require.Equal(t, l.Owner(), get(t, admin, l.Key()), "the server still holds the owner value")
	ok, err := l.Valid(ctx)
	require.NoError(t, err)
	assert.False(t, ok, "Valid() after Until = %v, want false", ok)
}

// TestExtendLaterRenewalsUseTTL: after Extend to a TTL other than the
// lock's, the watchdog's renewals send the new TTL (Lock.Extend's doc,
// lock.go: "later renewals use ttl too"): a lock taken for 10s and
// extended to 2s has a lease of at most 2s on the server after the
// watchdog has renewed it, not one of 10s.
func TestExtendLaterRenewalsUseTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	const taken, extended = 10 * time.Second, 2 * time.Second
	lk := newLocker(t, srv.Client(t), WithTTL(taken), WithRenewInterval(100*time.Millisecond))
	l, err := lk.TryLock(ctx, "extend-renew-ttl")
	require.NoError(t, err)
	require.NoError(t, l.Extend(ctx, extended))
	afterExtend := l.Until()
	require.True(t, eventually(5*time.Second, func() bool { return l.Until().After(afterExtend) }),
		"no renewal after Extend; Err() = %v", l.Err())
	require.NoError(t, l.Err())
	d, err := admin.PTTL(ctx, l.Key()).Result()
	require.NoError(t, err)
	assert.Positive(t, d)
	assert.LessOrEqual(t, d, extended, "PTTL after a renewal = %v, want <= %v (the Extend's TTL, not %v)", d, extended, taken)
	assert.LessOrEqual(t, time.Until(l.Until()), extended, "Until() after a renewal, from now")
	require.NoError(t, l.Unlock(ctx))
}

// doneAtSend counts, once a lock's Done channel is set, what the client
// sends and how much of it went while that channel was still open.
type doneAtSend struct {
	done       atomic.Pointer[<-chan struct{}]
	sent, open atomic.Int64
}

func (h *doneAtSend) check() {
	done := h.done.Load()
	if done == nil {
		return
	}
	h.sent.Add(1)
	select {
	case <-*done:
	default:
		h.open.Add(1)
	}
}

func (h *doneAtSend) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *doneAtSend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.check()
		return next(ctx, cmd)
	}
}

func (h *doneAtSend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.check()
		return next(ctx, cmds)
	}
}

// TestUnlockDoneBeforeSend: Unlock closes Done before it sends anything
// (Lock.Unlock's doc, lock.go: "It stops renewal and closes Done before
// sending anything"): a client hook sees every command of the release, and
// Done is closed at each of them. Nothing else of the Locker talks to the
// server meanwhile: no renewal (WithAutoRenew(false)), no tracking
// connection.
func TestUnlockDoneBeforeSend(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	h := &doneAtSend{}
	cl.AddHook(h)
	ctx := context.Background()
	lk := newLocker(t, cl, WithAutoRenew(false), WithLossTracking(false))
	l, err := lk.TryLock(ctx, "unlock-done-first")
	require.NoError(t, err)
	done := l.Done() // taken before Unlock, as by a goroutine watching the lock
	h.done.Store(&done)
	require.NoError(t, l.Unlock(ctx))
	h.done.Store(nil)
	require.Positive(t, h.sent.Load(), "commands Unlock sent")
	assert.Zero(t, h.open.Load(), "commands Unlock sent while Done was open = %d, want 0", h.open.Load())
	assert.Equal(t, "", get(t, srv.Client(t), "{redlock:unlock-done-first}"), "lock key after Unlock")
}

// scriptCalls is a client hook that counts the calls of one of the
// library's scripts through the client, by EVALSHA or by EVAL: n as they
// are sent, answered once their replies (or errors) are back.
type scriptCalls struct {
	sha, body   string
	n, answered atomic.Int64
}

func countScript(s *redis.Script) *scriptCalls {
	return &scriptCalls{sha: s.Hash(), body: scripts.Sources[s].Body}
}

func (h *scriptCalls) count(cmds ...redis.Cmder) int64 {
	var k int64
	for _, cmd := range cmds {
		args := cmd.Args()
		if len(args) > 1 && (args[1] == h.sha || args[1] == h.body) {
			k++
		}
	}
	return k
}

func (h *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		k := h.count(cmd)
		h.n.Add(k)
		defer h.answered.Add(k)
		return next(ctx, cmd)
	}
}

func (h *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		k := h.count(cmds...)
		h.n.Add(k)
		defer h.answered.Add(k)
		return next(ctx, cmds)
	}
}

// TestUnlockStopsRenewal: Unlock stops the lock's renewal (Lock.Unlock's
// doc, lock.go): a lock renewed every 200 ms gets no renewal after Unlock
// returns. The hook sees renewals before (so it would see one after), and
// none over the 5 renewal intervals that follow an Unlock made while the
// next renewal is queued. (A renewal the watchdog has already taken off its
// queue when Unlock begins is on its way and may be sent after it; the
// Unlock here comes a whole interval before the next one is due.)
func TestUnlockStopsRenewal(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	h := countScript(scripts.Extend) // the renewals
	cl.AddHook(h)
	ctx := context.Background()
	const every = 200 * time.Millisecond
	lk := newLocker(t, cl, WithTTL(5*time.Second), WithRenewInterval(every), WithLossTracking(false))
	l, err := lk.TryLock(ctx, "unlock-stops-renewal")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return h.n.Load() >= 2 }, 10*time.Second, time.Millisecond, "renewals while held")
	// Unlock between renewals, with the next one queued: the renewal just
	// sent has moved Until once its reply came back.
	until := l.Until()
	require.Eventually(t, func() bool { return l.Until().After(until) }, 10*time.Second, time.Millisecond, "a renewal's reply")
	require.NoError(t, l.Unlock(ctx))
	before := h.n.Load()
	time.Sleep(5 * every) // what is looked for is the absence of a renewal
	assert.Equal(t, before, h.n.Load(), "renewals sent after Unlock returned")
}
