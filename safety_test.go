package redlock

// Fault scenarios of SAFETY.md (issue 12): each breaks real redis-server
// processes through the public API, records every acquisition and fenced
// write in a history, and asserts exactly the violations the fault is known
// to cause: none where the library must hold, an overlap caught by the
// fence where a Redis lock is known to be unsafe. Each test name is its own
// -run pattern.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/history"
	"github.com/redlockgo/redlock/internal/redistest"
)

// scene is one scenario's history and fence.
type scene struct {
	t     *testing.T
	rec   *recorder
	fence Fence
}

func newScene(t *testing.T) *scene {
	t.Helper()
	return &scene{t: t, rec: newRecorder(t)}
}

// took records the result of an acquire call that returned now; it returns
// the lock's handle in the history, nil when err is not nil.
func (s *scene) took(l *Lock, err error) *history.Acquisition {
	if err != nil {
		return nil
	}
	return s.rec.acquired(l, time.Now())
}

// write is a fenced write by l's holder: Admit on the scene's fence.
func (s *scene) write(l *Lock) error { return s.rec.fenced(&s.fence, l) }

// check waits until every recorded lock has ended (the test must have
// closed their Lockers) and asserts the history has exactly the violations
// of the kinds in want, at least one of each.
func (s *scene) check(want ...history.Kind) {
	s.t.Helper()
	s.rec.checked.Store(true)
	require.True(s.t, s.rec.wait(10*time.Second), "recorded locks still held at the end of the scenario")
	got := s.rec.Kinds()
	if !assert.ElementsMatch(s.t, want, slices.Collect(maps.Keys(got)), "violation kinds") {
		s.t.Logf("history:\n%v\n%s", s.rec.Check(), s.rec.Dump())
		return
	}
	if len(want) > 0 {
		s.t.Logf("expected violations, recorded:\n%v", s.rec.Check())
	}
}

// checkLoss is check for a documented loss: b, another owner, was granted
// the name after a's key was lost on the server (a restart, a failover). The
// two overlap (Overlap, LateDone) unless a heard of the loss first, its Done
// closed before b's grant returned (a loaded machine restarts a server
// slowly, and a's tracking reads its key on the new connection): then the
// history must show no violation at all. b nil: no grant was recorded.
func (s *scene) checkLoss(a *Lock, b *history.Acquisition) {
	s.t.Helper()
	if d := doneAt(a); b != nil && !d.IsZero() && d.Before(b.AcquiredAt) {
		s.t.Logf("the first holder heard of the loss %v before the second's grant returned: no overlap", b.AcquiredAt.Sub(d))
		s.check()
		return
	}
	s.check(history.Overlap, history.LateDone)
}

// closeAll closes lockers in order, failing the test on an error.
func closeAll(t *testing.T, closers ...interface{ Close() error }) {
	t.Helper()
	for _, c := range closers {
		require.NoError(t, c.Close())
	}
}

// plainClient is a go-redis client of addr with short timeouts, closed when
// the test ends. retries < 0 disables go-redis's retries; 0 keeps its
// default.
func plainClient(t *testing.T, addr string, retries int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: retries})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// lockerOn returns a Locker on client, not closed by a cleanup: the
// scenario closes it, so that its locks end before the history is checked.
func lockerOn(t *testing.T, client Client, opts ...Option) *Locker {
	t.Helper()
	lk, err := NewLocker(client, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lk.Close() })
	return lk
}

// TestSafetyHolderPausedPastTTL: the holder stops (a GC pause, a frozen VM)
// past its TTL while another owner takes the name and writes. Its Done
// closed by Until, before the other owner got the lock; when it wakes, its
// write is rejected by the fence, and its Unlock and Extend leave the new
// owner's key alone. Without auto-renew the lease simply runs out; with it,
// the holder's renewals are cut off by a partition (its whole process is
// what pauses).
func TestSafetyHolderPausedPastTTL(t *testing.T) {
	t.Parallel()
	for _, renew := range []bool{false, true} {
		t.Run(fmt.Sprintf("autorenew=%v", renew), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			proxy := redistest.NewProxy(t, srv.Addr())
			// Leases of 1.5s: the margin between Done and the server's expiry
			// (the drift allowance and the loss lead, 34ms) must outlast a busy
			// machine's scheduling delays.
			const ttl = 1500 * time.Millisecond
			a := lockerOn(t, plainClient(t, proxy.Addr(), -1), WithTTL(ttl), WithAutoRenew(renew))
			b := lockerOn(t, srv.Client(t), WithRetry(ConstantRetry(10*time.Millisecond)))
			s := newScene(t)
			ctx := context.Background()

			la, err := a.TryLock(ctx, "paused-holder")
			s.took(la, err)
			require.NoError(t, err)
			require.NoError(t, s.write(la), "A's write while it holds the lock")
			if renew {
				proxy.Blackhole(true) // A's process is paused: nothing of it reaches Redis
			}
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			lb, err := b.Lock(lctx, "paused-holder")
			s.took(lb, err)
			require.NoError(t, err, "B's Lock while A is paused")
			require.NoError(t, s.write(lb))
			// A wakes up and carries on with its critical section.
			assert.ErrorIs(t, s.write(la), ErrStaleToken, "A's write after B's")
			assert.ErrorIs(t, la.Err(), ErrLost)
			proxy.Blackhole(false)
			assert.ErrorIs(t, la.Unlock(ctx), ErrNotHeld, "A's Unlock after waking")
			assert.Equal(t, lb.Owner(), get(t, srv.Client(t), "{redlock:paused-holder}"), "B's key after A's Unlock")
			require.NoError(t, lb.Unlock(ctx))
			closeAll(t, a, b)
			s.check()
		})
	}
}

// TestSafetyRedisPaused: Redis stops (SIGSTOP) during an acquire, a renewal
// and a release. Each call returns within the node timeout, the late effects
// of the queued scripts are undone or harmless, and a second owner that
// takes the name afterwards never overlaps the first. The bounds themselves
// are tested by TestPausedServer, TestWatchdogServerPaused and
// TestUnlockServerPaused.
func TestSafetyRedisPaused(t *testing.T) {
	t.Parallel()
	const nodeTimeout = 100 * time.Millisecond
	ctx := context.Background()
	t.Run("acquire", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		a := lockerOn(t, srv.Client(t), WithNodeTimeout(nodeTimeout), WithTTL(time.Second))
		b := lockerOn(t, srv.Client(t), WithRetry(ConstantRetry(10*time.Millisecond)))
		s := newScene(t)
		srv.Pause(t)
		la, err := a.TryLock(ctx, "paused-acquire")
		s.took(la, err)
		assert.ErrorIs(t, err, ErrNotObtained, "TryLock on a paused server")
		srv.Resume(t)
		// The queued acquire runs now; its grant is released, or runs out.
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		lb, err := b.Lock(lctx, "paused-acquire")
		s.took(lb, err)
		require.NoError(t, err, "B after the late grant")
		require.NoError(t, s.write(lb))
		require.NoError(t, lb.Unlock(ctx))
		closeAll(t, a, b)
		s.check()
	})
	t.Run("renewal", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		a := lockerOn(t, srv.Client(t), WithNodeTimeout(nodeTimeout), WithTTL(1500*time.Millisecond))
		b := lockerOn(t, srv.Client(t), WithRetry(ConstantRetry(10*time.Millisecond)))
		s := newScene(t)
		la, err := a.TryLock(ctx, "paused-renew")
		s.took(la, err)
		require.NoError(t, err)
		require.NoError(t, s.write(la))
		srv.Pause(t)
		select {
		case <-la.Done():
		case <-time.After(5 * time.Second):
			srv.Resume(t)
			t.Fatal("Done still open 5s after Redis paused under a 1.5s lease")
		}
		srv.Resume(t)
		// Renewals queued during the pause run now: none may revive A.
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		lb, err := b.Lock(lctx, "paused-renew")
		s.took(lb, err)
		require.NoError(t, err)
		require.NoError(t, s.write(lb))
		assert.ErrorIs(t, s.write(la), ErrStaleToken)
		assert.ErrorIs(t, la.Extend(ctx, time.Second), ErrNotHeld, "A's Extend after its loss")
		require.NoError(t, lb.Unlock(ctx))
		closeAll(t, a, b)
		s.check()
	})
	t.Run("release", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		a := lockerOn(t, srv.Client(t), WithNodeTimeout(nodeTimeout), WithTTL(2*time.Second))
		b := lockerOn(t, srv.Client(t), WithRetry(ConstantRetry(10*time.Millisecond)))
		s := newScene(t)
		la, err := a.TryLock(ctx, "paused-release")
		rec := s.took(la, err)
		require.NoError(t, err)
		srv.Pause(t)
		err = s.rec.unlock(ctx, rec, la)
		srv.Resume(t)
		assert.Error(t, err, "Unlock on a paused server: the outcome is unknown")
		assert.NotErrorIs(t, err, ErrNotHeld)
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		lb, err := b.Lock(lctx, "paused-release")
		s.took(lb, err)
		require.NoError(t, err)
		require.NoError(t, lb.Unlock(ctx))
		closeAll(t, a, b)
		s.check()
	})
}

// TestSafetyRestartEmpty: Redis is killed and restarted empty (no
// persistence) under a held lock. On a single node another owner gets the
// lock at once, the documented Redis loss, and the time-floored token lets
// the fence reject the first holder's write; the first holder learns of the
// loss at its next renewal. A Redlock whose holder has all three masters
// loses nothing when one restarts empty.
func TestSafetyRestartEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("single node", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		a := lockerOn(t, srv.Client(t), WithTTL(time.Second))
		b := lockerOn(t, srv.Client(t))
		s := newScene(t)
		la, err := a.TryLock(ctx, "restart")
		s.took(la, err)
		require.NoError(t, err)
		require.NoError(t, s.write(la))
		srv.Restart(t)
		lb, err := b.TryLock(ctx, "restart")
		acqB := s.took(lb, err)
		require.NoError(t, err, "B on the restarted server: the key is gone (documented loss)")
		assert.Greater(t, lb.Token(), la.Token(), "the token floor survives the lost counter")
		require.NoError(t, s.write(lb))
		assert.ErrorIs(t, s.write(la), ErrStaleToken, "A's write after B's")
		select {
		case <-la.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("A never learnt that its lock was lost")
		}
		assert.ErrorIs(t, la.Err(), ErrLost)
		require.NoError(t, lb.Unlock(ctx))
		closeAll(t, a, b)
		s.checkLoss(la, acqB)
	})
	t.Run("one Redlock master", func(t *testing.T) {
		t.Parallel()
		nodes := startRLNodes(t, 3, false, time.Second)
		clients := func() []Client {
			cs := make([]Client, len(nodes))
			for i, nd := range nodes {
				cs[i] = plainClient(t, nd.srv.Addr(), 0)
			}
			return cs
		}
		// 3s: on a starved machine (busy-test with other suites running)
		// renewals of a 1s lease came late enough to lose A's key.
		const ttl = 3 * time.Second
		a, err := NewRedlock(clients(), WithTTL(ttl))
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Close() })
		b, err := NewRedlock(clients(), WithTTL(ttl))
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		s := newScene(t)
		la, err := a.TryLock(ctx, "rl-restart")
		s.took(la, err)
		require.NoError(t, err)
		require.NoError(t, s.write(la))
		nodes[0].srv.Restart(t)
		lb, err := b.TryLock(ctx, "rl-restart")
		s.took(lb, err)
		assert.ErrorIs(t, err, ErrNotObtained, "B with A's key still on two of three masters")
		// A's renewals keep it held on the two masters that kept its key.
		lctx, cancel := context.WithTimeout(ctx, ttl+ttl/2)
		defer cancel()
		lb, err = b.Lock(lctx, "rl-restart")
		s.took(lb, err)
		assert.ErrorIs(t, err, ErrNotObtained, "B waiting over a lease while A renews")
		assert.NoError(t, la.Err(), "A after one master restarted empty")
		require.NoError(t, s.write(la))
		require.NoError(t, la.Unlock(ctx))
		closeAll(t, a, b)
		s.check()
	})
}

// TestSafetyRedlockRestartBareMajority is the spec's own counterexample
// (section "Performance, crash recovery and fsync"): A holds a Redlock on a
// bare majority {0,1} of three masters while master 2 is partitioned from it;
// master 0 restarts empty, and B, which reaches {0,2}, gets the lock too. The
// overlap is the documented loss without persistence or delayed restarts;
// B's token, floored by time, is above A's, so the fence rejects A's write.
func TestSafetyRedlockRestartBareMajority(t *testing.T) {
	ctx := context.Background()
	nodes := startRLNodes(t, 3, true, time.Second)
	a := newRL(t, nodes, WithTTL(time.Second), WithNodeTimeout(100*time.Millisecond))
	warmUp(t, a)
	direct := make([]Client, len(nodes))
	for i, nd := range nodes {
		direct[i] = plainClient(t, nd.srv.Addr(), 0)
	}
	b, err := NewRedlock(direct, WithTTL(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	s := newScene(t)

	nodes[2].proxy.Blackhole(true) // A cannot reach master 2
	la, err := a.TryLock(ctx, "bare-majority")
	s.took(la, err)
	require.NoError(t, err, "A on masters 0 and 1")
	require.NoError(t, s.write(la))
	nodes[0].srv.Restart(t)
	// B's connection to master 0 died with the restart: dial it again
	// first, so that B's 100ms node timeout is not spent on a slow dial.
	require.NoError(t, direct[0].(*redis.Client).Ping(ctx).Err(), "B's client to the restarted master 0")
	lb, err := b.TryLock(ctx, "bare-majority")
	acqB := s.took(lb, err)
	require.NoError(t, err, "B on masters 0 (restarted empty) and 2 (documented loss)")
	assert.Greater(t, lb.Token(), la.Token(), "B's token above A's")
	require.NoError(t, s.write(lb))
	assert.ErrorIs(t, s.write(la), ErrStaleToken, "A's write after B's")
	select {
	case <-la.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("A never learnt that its lock was lost")
	}
	require.NoError(t, lb.Unlock(ctx))
	nodes[2].proxy.Blackhole(false)
	closeAll(t, a, b)
	s.checkLoss(la, acqB)
}

// TestSafetyFailoverLosesKey is the failover of the Redlock debate, without
// replica acknowledgements: A's lock (and its fencing counter) never reached
// the replica, the replica is promoted, and B gets the lock. The overlap is
// the documented loss; A's stale write is rejected by a RedisFence on a
// separate storage server, because B's token, floored by the server's time,
// is above A's. When the write had reached the replica, B is refused.
func TestSafetyFailoverLosesKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, held := range []bool{true, false} {
		t.Run(fmt.Sprintf("replication held=%v", held), func(t *testing.T) {
			t.Parallel()
			pair := redistest.StartPair(t)
			storage := redistest.Start(t)
			guard, err := NewRedisFence(storage.Client(t))
			require.NoError(t, err)
			a := lockerOn(t, plainClient(t, pair.Master.Addr(), -1), WithTTL(time.Second), WithNodeTimeout(100*time.Millisecond))
			b := lockerOn(t, plainClient(t, pair.Replica.Addr(), -1))
			s := newScene(t)
			write := func(l *Lock) error {
				return s.rec.Fenced(l.Name(), l.Token(), func() error { return guard.Set(ctx, "resource", l.Token(), l.Owner(), 0) })
			}

			pair.HoldReplication(held)
			la, err := a.TryLock(ctx, "failover")
			s.took(la, err)
			require.NoError(t, err)
			require.NoError(t, write(la))
			if !held {
				pair.WaitSynced(t)
			}
			pair.Failover(t)
			lb, err := b.TryLock(ctx, "failover")
			acqB := s.took(lb, err)
			if !held {
				assert.ErrorIs(t, err, ErrNotObtained, "B after a failover that kept A's key")
				closeAll(t, a, b)
				s.check()
				return
			}
			require.NoError(t, err, "B on the promoted replica that missed A's key (documented loss)")
			assert.Greater(t, lb.Token(), la.Token())
			require.NoError(t, write(lb))
			assert.ErrorIs(t, write(la), ErrStaleToken, "A's write after B's, through the RedisFence")
			v, err := storage.Client(t).Get(ctx, "resource").Result()
			require.NoError(t, err)
			assert.Equal(t, lb.Owner(), v, "the resource holds B's write")
			require.NoError(t, lb.Unlock(ctx))
			closeAll(t, a, b)
			s.checkLoss(la, acqB)
		})
	}
}

// TestSafetyLatencyAboveTTL: replies slower than the TTL. An acquisition
// whose reply comes after its validity ended is not a lock (the spec's step
// 3) and leaves no key behind; a held lock whose renewal replies come too
// late is lost at Until, before anyone else gets it.
func TestSafetyLatencyAboveTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("acquire", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		proxy := redistest.NewProxy(t, srv.Addr())
		const ttl = 300 * time.Millisecond
		a := lockerOn(t, plainClient(t, proxy.Addr(), -1), WithTTL(ttl), WithNodeTimeout(time.Second))
		b := lockerOn(t, srv.Client(t), WithRetry(ConstantRetry(10*time.Millisecond)))
		s := newScene(t)
		proxy.SetDelay(ttl + 100*time.Millisecond)
		la, err := a.TryLock(ctx, "slow")
		s.took(la, err)
		assert.ErrorIs(t, err, ErrNotObtained, "TryLock whose grant arrived after its validity")
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		lb, err := b.Lock(lctx, "slow")
		s.took(lb, err)
		require.NoError(t, err)
		require.NoError(t, s.write(lb))
		require.NoError(t, lb.Unlock(ctx))
		proxy.SetDelay(0)
		closeAll(t, a, b)
		s.check()
	})
	t.Run("renewal", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		proxy := redistest.NewProxy(t, srv.Addr())
		const ttl = 1500 * time.Millisecond
		a := lockerOn(t, plainClient(t, proxy.Addr(), -1), WithTTL(ttl), WithNodeTimeout(2*time.Second))
		b := lockerOn(t, srv.Client(t), WithRetry(ConstantRetry(10*time.Millisecond)))
		s := newScene(t)
		la, err := a.TryLock(ctx, "slow-renew")
		s.took(la, err)
		require.NoError(t, err)
		proxy.SetDelay(2 * ttl)
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		lb, err := b.Lock(lctx, "slow-renew")
		s.took(lb, err)
		require.NoError(t, err)
		require.NoError(t, s.write(lb))
		assert.ErrorIs(t, la.Err(), ErrLost)
		assert.ErrorIs(t, s.write(la), ErrStaleToken)
		require.NoError(t, lb.Unlock(ctx))
		proxy.SetDelay(0)
		closeAll(t, a, b)
		s.check()
	})
}

// TestSafetyConnectionCut: the connection is reset after a script reached
// Redis and before its reply came back, during an acquire, a renewal and a
// release, with and without go-redis's retries. No call reports a lock that
// is not held, a release whose outcome is unknown is not reported as
// success or as "not held" when go-redis cannot retry it, and another owner
// never overlaps the first.
func TestSafetyConnectionCut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type env struct {
		srv   *redistest.Server
		proxy *redistest.Proxy
		admin *redis.Client
		a, b  *Locker
		s     *scene
	}
	setup := func(t *testing.T, retries int, ttl time.Duration) *env {
		srv := redistest.Start(t)
		proxy := redistest.NewProxy(t, srv.Addr())
		cl := plainClient(t, proxy.Addr(), retries)
		require.NoError(t, cl.Ping(ctx).Err())
		return &env{
			srv: srv, proxy: proxy, admin: srv.Client(t),
			a: lockerOn(t, cl, WithTTL(ttl), WithNodeTimeout(2*time.Second)),
			b: lockerOn(t, srv.Client(t), WithRetry(ConstantRetry(10*time.Millisecond))),
			s: newScene(t),
		}
	}
	// cutAfter holds replies, runs call in a goroutine, waits until the
	// server shows its effect, cuts every connection, and returns the call's
	// error.
	cutAfter := func(t *testing.T, e *env, ran func() bool, call func() error) error {
		e.proxy.Hold(true)
		res := make(chan error, 1)
		go func() { res <- call() }()
		require.True(t, eventually(5*time.Second, ran), "the script never ran")
		e.proxy.Cut()
		e.proxy.Hold(false)
		select {
		case err := <-res:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("call still blocked 10s after its connection was cut")
			return nil
		}
	}
	exists := func(e *env, key string) bool { return e.admin.Exists(ctx, key).Val() == 1 }
	for _, retries := range []int{-1, 0} {
		t.Run(fmt.Sprintf("acquire retries=%d", retries), func(t *testing.T) {
			t.Parallel()
			e := setup(t, retries, 2*time.Second)
			var la *Lock
			err := cutAfter(t, e, func() bool { return exists(e, "{redlock:cut-acquire}") }, func() error {
				var err error
				la, err = e.a.TryLock(ctx, "cut-acquire")
				return err
			})
			e.s.took(la, err)
			if err == nil {
				// go-redis retried, and the script recognised its own grant.
				assert.Equal(t, la.Owner(), get(t, e.admin, "{redlock:cut-acquire}"))
				require.NoError(t, e.s.write(la))
				require.NoError(t, la.Unlock(ctx))
			} else {
				assert.ErrorIs(t, err, ErrNotObtained)
			}
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			lb, err := e.b.Lock(lctx, "cut-acquire")
			e.s.took(lb, err)
			require.NoError(t, err)
			require.NoError(t, lb.Unlock(ctx))
			closeAll(t, e.a, e.b)
			e.s.check()
		})
		t.Run(fmt.Sprintf("release retries=%d", retries), func(t *testing.T) {
			t.Parallel()
			e := setup(t, retries, 2*time.Second)
			la, err := e.a.TryLock(ctx, "cut-release")
			rec := e.s.took(la, err)
			require.NoError(t, err)
			err = cutAfter(t, e, func() bool { return !exists(e, "{redlock:cut-release}") }, func() error {
				return e.s.rec.unlock(ctx, rec, la)
			})
			if retries < 0 {
				assert.Error(t, err, "Unlock whose reply was cut, without retries: the outcome is unknown")
			}
			assert.NotErrorIs(t, err, ErrNotHeld, "Unlock whose reply was cut")
			assert.ErrorIs(t, la.Err(), ErrReleased)
			lb, err := e.b.TryLock(ctx, "cut-release")
			e.s.took(lb, err)
			require.NoError(t, err, "the release ran: the name is free at once")
			require.NoError(t, lb.Unlock(ctx))
			closeAll(t, e.a, e.b)
			e.s.check()
		})
	}
	t.Run("renewal", func(t *testing.T) {
		t.Parallel()
		const ttl = 900 * time.Millisecond
		e := setup(t, -1, ttl)
		la, err := e.a.TryLock(ctx, "cut-renew")
		e.s.took(la, err)
		require.NoError(t, err)
		// Renewals are pipelined, and go-redis dials a connection of its own
		// for pipelines: let the first renewal open it, so that what the cut
		// hits is a renewal script and not a connection handshake.
		scripts := func() int { return commandCalls(t, e.srv, "evalsha") + commandCalls(t, e.srv, "eval") }
		before := scripts()
		require.True(t, eventually(5*time.Second, func() bool { return scripts() > before }), "no first renewal")
		// Wait for the next renewal to reach the server, with its reply
		// held, and cut it.
		before = scripts()
		err = cutAfter(t, e, func() bool { return scripts() > before }, func() error { return nil })
		require.NoError(t, err)
		// The watchdog retries on a new connection before Until. Two TTLs
		// later the lock must still be held: a lost renewal reply is not a
		// lost lock.
		deadline := time.Now().Add(2 * ttl)
		for time.Now().Before(deadline) && la.Err() == nil {
			time.Sleep(20 * time.Millisecond) // the duration under test: renewals after the cut
		}
		assert.NoError(t, la.Err(), "lock after one renewal's connection was cut")
		lb, err := e.b.TryLock(ctx, "cut-renew")
		e.s.took(lb, err)
		assert.ErrorIs(t, err, ErrNotObtained, "B while A still renews")
		closeAll(t, e.a, e.b)
		e.s.check()
	})
}

// TestSafetyEightLockers: 8 Lockers, each on its own client, contend for
// one name; every holder writes through the fence. The history must show
// no overlap, increasing tokens, no stale write and every Done closed
// before the next owner.
func TestSafetyEightLockers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := newScene(t)
	ctx := context.Background()
	const lockers, rounds = 8, 40
	var lks []*Locker
	for range lockers {
		lks = append(lks, lockerOn(t, srv.Client(t), WithTTL(2*time.Second), WithRetry(ConstantRetry(2*time.Millisecond))))
	}
	var wg sync.WaitGroup
	for _, lk := range lks {
		wg.Go(func() {
			for range rounds {
				lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				l, err := lk.Lock(lctx, "eight")
				cancel()
				a := s.took(l, err)
				if !assert.NoError(t, err) {
					return
				}
				assert.NoError(t, s.write(l))
				assert.NoError(t, s.rec.unlock(ctx, a, l))
			}
		})
	}
	wg.Wait()
	for _, lk := range lks {
		require.NoError(t, lk.Close())
	}
	s.check()
	assert.Len(t, s.rec.Acquisitions(), lockers*rounds)
}

// TestSafetyCloseRaces: Close of a Locker races its grants, renewals,
// waiters and Unlocks while another Locker contends for the same names.
// Afterwards the other Locker gets every name at once (nothing orphaned),
// and the history has no violation.
func TestSafetyCloseRaces(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	names := []string{"cr-0", "cr-1", "cr-2", "cr-3"}
	for round := range 5 {
		s := newScene(t)
		// A node timeout longer than any stall of a loaded machine: the
		// cleanup calls a waiter that gives up makes (unwait) and Close's
		// releases are then answered before Lock and Close return, instead
		// of landing, bounded but late, after the check below began.
		// Clients with go-redis's 3s socket timeouts keep every call on the
		// goroutine path, where grants can land after Close began.
		opts := []Option{WithTTL(time.Second), WithRenewInterval(100 * time.Millisecond), WithNodeTimeout(2 * time.Second)}
		a := lockerOn(t, defaultClient(t, srv), opts...)
		b := lockerOn(t, defaultClient(t, srv), opts...)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 8 {
			lk := a
			if i%2 == 1 {
				lk = b
			}
			wg.Go(func() {
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					lctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
					l, err := lk.Lock(lctx, names[(i+n)%len(names)])
					cancel()
					if errors.Is(err, ErrClosed) {
						return
					}
					rec := s.took(l, err)
					if err != nil {
						continue
					}
					_ = s.write(l)
					if n%3 == 0 {
						time.Sleep(150 * time.Millisecond) // held across a renewal
					}
					_ = s.rec.unlock(ctx, rec, l)
				}
			})
		}
		// Let the workers get going, then close A in the middle of it all.
		require.True(t, eventually(5*time.Second, func() bool { return len(s.rec.Acquisitions()) >= 8 }))
		require.NoError(t, a.Close(), "round %d", round)
		close(stop)
		wg.Wait()
		for _, n := range names {
			l, err := b.TryLock(ctx, n)
			s.took(l, err)
			require.NoError(t, err, "round %d: %s after A closed", round, n)
			require.NoError(t, l.Unlock(ctx))
		}
		require.NoError(t, b.Close())
		s.check()
	}
}

// defaultClient is a client with go-redis's default timeouts (5s dial, 3s
// read and write), without hidden retries.
func defaultClient(t testing.TB, srv *redistest.Server) *redis.Client {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { cl.Close() })
	return cl
}
