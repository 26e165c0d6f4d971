package redlock

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// TestSentinelFollowsLeaderLag: two Lockers on go-redis Sentinel clients
// with default options, A subscribed to the sentinel that leads a planned
// failover, B to another. The leader reports the new master as soon as it
// reconfigures the other replicas, but publishes +switch-master only at
// the end of the failover; a go-redis client subscribed to it kept its
// pooled connections to the demoted (still writable) master until then,
// and A granted names there that B granted on the new master. Once every
// sentinel reports the new master, both Lockers take the same fresh names
// one after the other for 3 s: every name goes to one of them only, after
// at most one node timeout. (Before, the last such name came about 1 s
// after, when the leader ended the failover.)
func TestSentinelFollowsLeaderLag(t *testing.T) {
	t.Parallel()
	const nodeTimeout = 600 * time.Millisecond
	g := redistest.StartSentinel(t, redistest.WithSentinels(3))
	g.AddReplica(t)
	ctx := context.Background()
	mk := func(i int) *Locker {
		cl := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: g.MasterName(), SentinelAddrs: g.SentinelAddrs()[i : i+1]})
		t.Cleanup(func() { _ = cl.Close() })
		return newLocker(t, cl, WithNodeTimeout(nodeTimeout))
	}
	a, b := mk(0), mk(1)
	for _, lk := range []*Locker{a, b} {
		for range 4 { // pooled connections, so that A need not dial later
			l, err := lk.TryLock(ctx, "warm")
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))
		}
	}
	g.Failover(t) // SENTINEL FAILOVER through sentinel 0: it leads
	t0 := time.Now()
	both, late := 0, 0
	var last time.Duration
	for i := 0; time.Since(t0) < 3*time.Second; i++ {
		name := fmt.Sprintf("z-%d", i)
		la, errA := a.TryLock(ctx, name)
		lb, errB := b.TryLock(ctx, name)
		if errA == nil && errB == nil {
			both++
			last = time.Since(t0)
			if last > nodeTimeout {
				late++
			}
		}
		for _, l := range []*Lock{la, lb} {
			if l != nil {
				_ = l.Unlock(ctx)
			}
		}
		time.Sleep(20 * time.Millisecond) // pacing, not synchronisation
	}
	t.Logf("names held by both Lockers after every sentinel reported the new master: %d (the last %v after)", both, last.Round(time.Millisecond))
	assert.Zero(t, late, "names held by both Lockers more than one node timeout after every sentinel reported the new master")
}

// TestSentinelMinReplicasWarning: NewLocker on a go-redis Sentinel client
// warns once when the master accepts writes without replicas
// (min-replicas-to-write 0), and not when it is set; a plain client to the
// same server is not warned.
func TestSentinelMinReplicasWarning(t *testing.T) {
	t.Parallel()
	g := redistest.StartSentinel(t)
	cl := g.FailoverClient(t, nil)
	const msg = "Sentinel master without min-replicas-to-write"
	h := &logRecords{}
	newLocker(t, cl, WithLogger(slog.New(h)), warmedUp)
	assert.True(t, h.logged(slog.LevelWarn, msg), "NewLocker on a Sentinel master with min-replicas-to-write 0")

	g.Master(t).Do(t, "CONFIG", "SET", "min-replicas-to-write", "1")
	h = &logRecords{}
	newLocker(t, cl, WithLogger(slog.New(h)), warmedUp)
	assert.False(t, h.logged(slog.LevelWarn, msg), "NewLocker with min-replicas-to-write 1")

	g.Master(t).Do(t, "CONFIG", "SET", "min-replicas-to-write", "0")
	h = &logRecords{}
	newLocker(t, g.Master(t).Client(t), WithLogger(slog.New(h)), warmedUp)
	assert.False(t, h.logged(slog.LevelWarn, msg), "NewLocker on a plain client")
}

// TestSentinelFollowCheckEndsWithCtx: the first acquisition on an idle
// Locker over a go-redis Sentinel client checks where the master is before
// it is sent (internal/engine/follow.go), and go-redis bounds that query to
// the sentinel by the Sentinel client's own timeouts (5 s here), not by the
// call's ctx. With the sentinel's replies held back, the master up and the
// client's pool warm: a Lock and two TryLocks at once, each with a ctx of
// 150 ms, return at the end of their ctx with ErrNotObtained and the ctx's
// error, side by side (the check is shared, not queued for); a TryLock whose
// ctx outlasts the node timeout waits for the check one node timeout, then
// gets its name from the master. (Before: the three returned after 5 s,
// 10 s and 15 s, one check after the other.)
func TestSentinelFollowCheckEndsWithCtx(t *testing.T) {
	t.Parallel()
	const (
		nodeTimeout = 300 * time.Millisecond
		callCtx     = 150 * time.Millisecond
		bound       = time.Second
	)
	g := redistest.StartSentinel(t)
	proxy := redistest.NewProxy(t, g.SentinelAddrs()[0])
	// Default timeouts; no retries, so that a dial left waiting on the
	// sentinel ends with the test (go-redis's dial goroutines outlive a
	// client's Close while they retry).
	cl := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    g.MasterName(),
		SentinelAddrs: []string{proxy.Addr()},
		MaxRetries:    -1,
		DialerRetries: 1,
	})
	t.Cleanup(func() { _ = cl.Close() })
	lk := newLocker(t, cl, WithNodeTimeout(nodeTimeout))
	ctx := context.Background()
	// Pooled connections for every call below, taken straight from the
	// client: an acquisition would make the follower busy, not idle.
	conns := make([]*redis.Conn, 6)
	for i := range conns {
		conns[i] = cl.Conn()
		require.NoError(t, conns[i].Ping(ctx).Err())
	}
	for _, c := range conns {
		require.NoError(t, c.Close())
	}

	proxy.Hold(true)
	t.Cleanup(func() { proxy.Hold(false) }) // before lk.Close: the check ends

	calls := map[string]func(context.Context) error{
		"Lock": func(ctx context.Context) error {
			_, err := lk.Lock(ctx, "follow-ctx-lock")
			return err
		},
		"TryLock 1": func(ctx context.Context) error {
			_, err := lk.TryLock(ctx, "follow-ctx-try-1")
			return err
		},
		"TryLock 2": func(ctx context.Context) error {
			_, err := lk.TryLock(ctx, "follow-ctx-try-2")
			return err
		},
	}
	type result struct {
		name string
		took time.Duration
		err  error
	}
	results := make(chan result, len(calls))
	for name, call := range calls {
		go func() {
			ctx, cancel := context.WithTimeout(ctx, callCtx)
			defer cancel()
			start := time.Now()
			err := call(ctx)
			results <- result{name, time.Since(start), err}
		}()
	}
	for range calls {
		r := <-results
		t.Logf("%s: %v", r.name, r.took.Round(time.Millisecond))
		assert.Less(t, r.took, bound, "%s with a ctx of %v on an idle follower, sentinel silent", r.name, callCtx)
		assert.ErrorIs(t, r.err, ErrNotObtained, "%s() = %v, want ErrNotObtained", r.name, r.err)
		assert.ErrorIs(t, r.err, context.DeadlineExceeded, "%s() = %v, want the ctx's error", r.name, r.err)
	}

	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	l, err := lk.TryLock(lctx, "follow-ctx-after")
	took := time.Since(start)
	t.Logf("TryLock past the node timeout: %v", took.Round(time.Millisecond))
	require.NoError(t, err, "TryLock() with a ctx longer than the node timeout, sentinel silent, master up")
	assert.Less(t, took, bound, "TryLock() waits for the sentinel at most about one node timeout (%v)", nodeTimeout)
	require.NoError(t, l.Unlock(ctx))
}
