package redlock

// Real-server fault tests of the answers the library gives: lost replies,
// refusals by ACL, failovers under a waiting Locker.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/internal/scripts"
)

// lossyClient is a client through a proxy that can drop replies, with
// go-redis's default retries and one connection, so that the next reply the
// proxy drops is the next command's.
func lossyClient(t *testing.T) (*redistest.Server, *redistest.Proxy, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	cl := redis.NewClient(&redis.Options{Addr: proxy.Addr(), PoolSize: 1})
	t.Cleanup(func() { cl.Close() })
	return srv, proxy, cl
}

// TestLostReplies: a command that Redis carried out, whose reply was lost
// and which go-redis then retried on a new connection, reports what
// happened, not what the retry found.
func TestLostReplies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	drop := func(t *testing.T, cl *redis.Client, p *redistest.Proxy) {
		t.Helper()
		// Every script cached and the connection open, so that the reply
		// lost is the write's, not a NOSCRIPT or a handshake.
		for _, s := range scripts.All {
			require.NoError(t, s.Load(ctx, cl).Err())
		}
		require.NoError(t, cl.Ping(ctx).Err())
		p.DropReplies(1)
	}
	t.Run("Unlock", func(t *testing.T) {
		srv, p, cl := lossyClient(t)
		lk := newLocker(t, cl)
		l, err := lk.TryLock(ctx, "lost-unlock")
		require.NoError(t, err)
		drop(t, cl, p)
		require.NoError(t, l.Unlock(ctx), "Unlock() whose first reply was lost")
		assert.Zero(t, srv.Client(t).Exists(ctx, "{redlock:lost-unlock}").Val())
	})
	t.Run("Unlock after another owner took the name", func(t *testing.T) {
		// The marker says who released; a new owner's key does not make
		// the retried release of the old one a "not held".
		// Recorded: the history must show the two owners one after the other.
		rec := newRecorder(t)
		srv, p, cl := lossyClient(t)
		lk := newLocker(t, cl)
		other := newLocker(t, srv.Client(t))
		l, err := lk.TryLock(ctx, "lost-unlock-2")
		require.NoError(t, err)
		a := rec.acquired(l, time.Now())
		require.NoError(t, cl.Ping(ctx).Err())
		p.SetDelay(200 * time.Millisecond) // room for the other owner between the two tries
		p.DropReplies(1)
		done := make(chan error, 1)
		go func() { done <- rec.unlock(ctx, a, l) }()
		var nl *Lock
		require.True(t, eventually(2*time.Second, func() bool {
			nl, err = other.TryLock(ctx, "lost-unlock-2")
			return err == nil
		}))
		rec.acquired(nl, time.Now())
		require.NoError(t, <-done)
		assert.Equal(t, nl.Owner(), get(t, srv.Client(t), "{redlock:lost-unlock-2}"), "the new owner's key is untouched")
	})
	t.Run("hand-off", func(t *testing.T) {
		// A hand-off writes no released marker: the one go-redis sends
		// again finds the next owner's value in the key, which answers as
		// the first run did.
		srv, p, cl := lossyClient(t)
		lk := newLocker(t, cl, WithRetry(ConstantRetry(time.Hour)), WithLossTracking(false))
		holder, err := lk.TryLock(ctx, "lost-handoff")
		require.NoError(t, err)
		waiter := waitBehind(t, lk, "lost-handoff")
		// The waiter's SUBSCRIBE is answered before a reply is dropped:
		// the reply lost is the hand-off's.
		waitSubscribers(t, srv, rlKey("lost-handoff")+scripts.ChannelSuffix, 1)
		drop(t, cl, p)
		scripts0 := commandCalls(t, srv, "evalsha")
		require.NoError(t, holder.Unlock(ctx), "Unlock() whose hand-off reply was lost")
		w := waiter()
		assert.Equal(t, 2, commandCalls(t, srv, "evalsha")-scripts0, "the hand-off and go-redis's retry of it")
		assert.Equal(t, w.Owner(), get(t, srv.Client(t), rlKey("lost-handoff")), "the waiter holds the name")
		assert.Greater(t, w.Token(), holder.Token())
		require.NoError(t, w.Unlock(ctx))
	})
	t.Run("Extend", func(t *testing.T) {
		srv, p, cl := lossyClient(t)
		lk := newLocker(t, cl, WithAutoRenew(false))
		l, err := lk.TryLock(ctx, "lost-extend", WithTTL(2*time.Second))
		require.NoError(t, err)
		drop(t, cl, p)
		require.NoError(t, l.Extend(ctx, 20*time.Second), "Extend() whose first reply was lost")
		assert.Greater(t, srv.Client(t).PTTL(ctx, "{redlock:lost-extend}").Val(), 10*time.Second)
	})
	t.Run("TryLock", func(t *testing.T) {
		srv, p, cl := lossyClient(t)
		lk := newLocker(t, cl)
		drop(t, cl, p)
		l, err := lk.TryLock(ctx, "lost-acquire")
		require.NoError(t, err, "TryLock() whose first reply was lost")
		assert.Equal(t, l.Owner(), get(t, srv.Client(t), "{redlock:lost-acquire}"))
		assert.Positive(t, l.Token())
	})
	t.Run("Do", func(t *testing.T) {
		srv, p, cl := lossyClient(t)
		lk := newLocker(t, cl)
		err := lk.Do(ctx, "lost-do", func(ctx context.Context) error {
			drop(t, cl, p)
			return nil
		})
		require.NoError(t, err, "Do() whose release reply was lost")
		assert.Zero(t, srv.Client(t).Exists(ctx, "{redlock:lost-do}").Val())
	})
	t.Run("renewal and Close", func(t *testing.T) {
		srv, p, cl := lossyClient(t)
		lk, err := NewLocker(cl, WithTTL(300*time.Millisecond))
		require.NoError(t, err)
		l, err := lk.TryLock(ctx, "lost-renew")
		require.NoError(t, err)
		drop(t, cl, p)
		time.Sleep(400 * time.Millisecond) // the duration under test: renewals, one with its reply lost
		require.NoError(t, l.Err(), "renewal whose reply was lost")
		drop(t, cl, p)
		require.NoError(t, lk.Close())
		assert.Zero(t, srv.Client(t).Exists(ctx, "{redlock:lost-renew}").Val(), "Close() whose pipelined release reply was lost")
	})
}

// TestReleaseWithoutChannelRights: a Redis 7 ACL user without channel
// rights cannot PUBLISH. The release still stands and says so, waiters still
// get the lock (by their timers), and the refusal is logged.
func TestReleaseWithoutChannelRights(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.ACLUser(t, "locker", "secret", "~*", "+@all") // channels: none (resetchannels)
	client := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "locker", Password: "secret"})
		t.Cleanup(func() { c.Close() })
		return c
	}
	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))
	a := newLocker(t, client(), WithLogger(logger))
	b := newLocker(t, client())
	ctx := context.Background()
	require.Error(t, client().Publish(ctx, "x", "y").Err(), "the ACL user must lack channel rights for this test")

	l, err := a.TryLock(ctx, "acl")
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		w, err := b.Lock(lctx, "acl")
		if err == nil {
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	waiting(t, b.c, "acl")
	released := time.Now()
	require.NoError(t, l.Unlock(ctx), "Unlock() by a user who may not PUBLISH")
	require.NoError(t, <-got, "waiter of a release that could not be published")
	t.Logf("waiter got the lock %v after the unpublished release", time.Since(released))
	logMu.Lock()
	logged := logs.String()
	logMu.Unlock()
	assert.Contains(t, logged, "refused to publish")

	require.NoError(t, a.Do(ctx, "acl-do", func(context.Context) error { return nil }))
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (lw *lockedWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.Write(p)
}

// TestWaitAcrossFailover: a Locker on a Sentinel-managed master whose
// waiters subscribed before a failover still hands the lock off promptly
// after it: go-redis leaves pub/sub connections on the old master, so the
// first hand-off is found by the waiter's capped timer, which re-homes the
// subscription; later hand-offs come by message again.
func TestWaitAcrossFailover(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failover func(g *redistest.SentinelGroup, t *testing.T)
	}{
		{"planned failover", func(g *redistest.SentinelGroup, t *testing.T) { g.Failover(t) }},
		{"killed master", func(g *redistest.SentinelGroup, t *testing.T) { g.KillMaster(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := redistest.StartSentinel(t)
			opts := &redis.FailoverOptions{DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second}
			holder := newLocker(t, g.FailoverClient(t, opts))
			waiterClient := g.FailoverClient(t, opts)
			attempts := countScript(scripts.Acquire)
			waiterClient.AddHook(attempts)
			waiter := newLocker(t, waiterClient)
			ctx := context.Background()

			handOff := func(name string) time.Duration {
				t.Helper()
				var l *Lock
				require.True(t, eventually(10*time.Second, func() bool {
					var err error
					l, err = holder.TryLock(ctx, name)
					return err == nil
				}), "holder cannot lock %s", name)
				got := make(chan error, 1)
				before := attempts.answered.Load()
				go func() {
					lctx, cancel := context.WithTimeout(ctx, 4*time.Second)
					defer cancel()
					w, err := waiter.Lock(lctx, name)
					if err == nil {
						_ = w.Unlock(ctx)
					}
					got <- err
				}()
				waiting(t, waiter.c, name)
				// The release comes after the waiter's second attempt (its
				// first poll) was refused: it then sleeps on its capped timer and trusts
				// messages, so a message must wake it, or, when none comes,
				// the timer that re-homes its subscription. A release caught
				// by the first poll instead re-homes nothing, and the next
				// hand-off would wait for the capped timer too.
				require.True(t, eventually(5*time.Second, func() bool { return attempts.answered.Load()-before >= 2 }), "the waiter's first two attempts")
				released := time.Now()
				require.NoError(t, l.Unlock(ctx))
				require.NoError(t, <-got, "Lock() with a 4s deadline on a free name")
				return time.Since(released)
			}

			t.Logf("before: hand-off in %v", handOff("fo-0"))
			tc.failover(g, t)
			// go-redis moves command connections once its sentinel tells
			// it; until then a lock could be taken on the old master. Wait
			// for both clients to write to the new one.
			master := g.Master(t).Client(t)
			for _, lk := range []*Locker{holder, waiter} {
				require.True(t, eventually(10*time.Second, func() bool {
					l, err := lk.TryLock(ctx, "probe", WithAutoRenew(false))
					if err != nil {
						return false
					}
					onNew := get(t, master, "{redlock:probe}") == l.Owner()
					_ = l.Unlock(ctx)
					return onNew
				}), "client still writes to the old master")
			}
			first := handOff("fo-1")
			second := handOff("fo-1")
			t.Logf("after %s: first hand-off in %v, second in %v", tc.name, first, second)
			assert.Less(t, first, engine.MaxTrustedSleep+500*time.Millisecond, "first hand-off after the failover took the lease, not the capped sleep")
			assert.Less(t, second, 500*time.Millisecond, "second hand-off after the failover was not woken by a message")
		})
	}
}

// TestLockerFailoverClientBasics: the whole API over a failover client.
func TestLockerFailoverClientBasics(t *testing.T) {
	t.Parallel()
	g := redistest.StartSentinel(t)
	lk := newLocker(t, g.FailoverClient(t, nil))
	ctx := context.Background()
	for i := range 3 {
		err := lk.Do(ctx, fmt.Sprintf("fc-%d", i), func(ctx context.Context) error {
			l, _ := FromContext(ctx)
			return l.Extend(ctx, 5*time.Second)
		})
		require.NoError(t, err)
	}
}

// TestServerRefusals: a refusal no retry can fix reaches TryLock as the
// server's error, and Lock gives up at once instead of waiting for its ctx.
func TestServerRefusals(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, srv *redistest.Server) *redis.Client
		match func(error) bool
	}{
		{"WRONGTYPE on the lock key", func(t *testing.T, srv *redistest.Server) *redis.Client {
			srv.Do(t, "HSET", "{redlock:refused}", "f", "v")
			return srv.Client(t)
		}, func(err error) bool { return redis.HasErrorPrefix(err, "WRONGTYPE") }},
		{"WRONGTYPE on the fence key", func(t *testing.T, srv *redistest.Server) *redis.Client {
			srv.Do(t, "HSET", "{redlock:refused}:fence", "f", "v")
			return srv.Client(t)
		}, func(err error) bool { return redis.HasErrorPrefix(err, "WRONGTYPE") }},
		{"NOPERM on the key", func(t *testing.T, srv *redistest.Server) *redis.Client {
			srv.ACLUser(t, "narrow", "pw", "~other:*", "+@all")
			c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "narrow", Password: "pw"})
			t.Cleanup(func() { c.Close() })
			return c
		}, redis.IsPermissionError},
		{"NOAUTH", func(t *testing.T, srv *redistest.Server) *redis.Client {
			srv.Do(t, "CONFIG", "SET", "requirepass", "pw")
			return srv.Client(t) // no password
		}, func(err error) bool { return redis.HasErrorPrefix(err, "NOAUTH") }},
		{"OOM", func(t *testing.T, srv *redistest.Server) *redis.Client {
			srv.Do(t, "CONFIG", "SET", "maxmemory", "1")
			srv.Do(t, "CONFIG", "SET", "maxmemory-policy", "noeviction")
			return srv.Client(t)
		}, redis.IsOOMError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			lk := newLocker(t, tc.setup(t, srv))
			_, err := lk.TryLock(ctx, "refused")
			require.ErrorIs(t, err, ErrNotObtained)
			assert.True(t, tc.match(err), "TryLock() = %v, want the server's refusal", err)
			var ne *NodeError
			assert.ErrorAs(t, err, &ne)
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			start := time.Now()
			_, err = lk.Lock(lctx, "refused")
			assert.True(t, tc.match(err), "Lock() = %v, want the server's refusal", err)
			assert.Less(t, time.Since(start), time.Second, "Lock() kept retrying a refusal no retry can fix")
		})
	}
}

// TestRedlockRetriedAcquireAfterUnlock: a master whose acquire reply was lost
// gets the acquire again from go-redis's retry, after the lock's release
// already ran there; that second grant must be released, not left owned by
// nobody. The release is Unlock's, or Close's (which releases every held
// lock in one batch).
func TestRedlockRetriedAcquireAfterUnlock(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"Unlock", "Close"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			srvs := redistest.StartN(t, 3)
			proxy := redistest.NewProxy(t, srvs[2].Addr())
			var clients []Client
			for i, s := range srvs {
				opt := &redis.Options{Addr: s.Addr(), ReadTimeout: time.Second}
				if i == 2 {
					opt.Addr = proxy.Addr()
					opt.MinRetryBackoff, opt.MaxRetryBackoff = 300*time.Millisecond, 300*time.Millisecond
				}
				c := redis.NewClient(opt)
				t.Cleanup(func() { c.Close() })
				clients = append(clients, c)
			}
			r, err := NewRedlock(clients)
			require.NoError(t, err)
			ctx := context.Background()
			require.NoError(t, clients[2].(*redis.Client).Ping(ctx).Err())
			proxy.DropReplies(1)
			l, err := r.TryLock(ctx, "retried")
			require.NoError(t, err)
			admin := srvs[2].Client(t)
			// The first acquire ran on the third master (its reply is what
			// was lost); go-redis's retry is still waiting out its backoff.
			require.True(t, eventually(time.Second, func() bool { return admin.Exists(ctx, "{redlock:retried}").Val() == 1 }))
			if end == "Unlock" {
				require.NoError(t, l.Unlock(ctx))
			}
			// Close waits for the Redlock's goroutines, the retrying
			// acquire among them, so what it left on the server is final.
			require.NoError(t, r.Close())
			assert.Zero(t, admin.Exists(ctx, "{redlock:retried}").Val(),
				"the retried grant on the third master is still there (owner %q, PTTL %v)", get(t, admin, "{redlock:retried}"), admin.PTTL(ctx, "{redlock:retried}").Val())
		})
	}
}

// TestRedlockUnlockCountsStraggler: Unlock releases at once where the
// acquire answered and leaves a master whose acquire is still on its way to
// that call (one release per master). That master's release still counts
// for Unlock's quorum: with one of the answered masters silent, Unlock
// returns nil once the straggler's grant has been released, not "reached 1
// of 3 nodes" while the lock is in fact released on two.
func TestRedlockUnlockCountsStraggler(t *testing.T) {
	t.Parallel()
	nodes := startRLNodes(t, 3, true, 5*time.Second)
	r := newRL(t, nodes, WithNodeTimeout(3*time.Second), WithAutoRenew(false))
	warmUp(t, r)
	ctx := context.Background()
	// Master 2 gets every command 300ms late: TryLock returns at the quorum
	// of masters 0 and 1, and Unlock, called at once, finds master 2's
	// acquire still on its way.
	nodes[2].proxy.SetDelay(300 * time.Millisecond)
	l, err := r.TryLock(ctx, "straggler")
	require.NoError(t, err, "TryLock at a quorum of two")
	nodes[0].proxy.Blackhole(true) // its release will not be answered
	start := time.Now()
	err = l.Unlock(ctx)
	took := time.Since(start)
	nodes[0].proxy.Blackhole(false)
	require.NoError(t, err, "Unlock with master 1 and the straggler released, master 0 silent (after %v)", took)
	assert.Empty(t, holding(t, nodes, "straggler", 1, 2), "keys left on the answering masters")
	t.Logf("Unlock returned after %v", took.Round(time.Millisecond))
}

// TestNameFreeAfterPause: an attempt that a paused server left unanswered
// leaves nothing once the server resumes, although the grant and the
// attempt's cleanup wait in the server's sockets together and may run in
// either order: the name is free for another Locker within 1s of the
// resume. Before, the cleanup that ran first found nothing, and the grant
// after it held the name for a whole lease (10s). Both kinds of client: one
// that reads the late reply (go-redis defaults), one whose call was cut at
// its deadline (ContextTimeoutEnabled), whose reply nobody reads.
func TestNameFreeAfterPause(t *testing.T) {
	t.Parallel()
	for _, deadlines := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", deadlines), func(t *testing.T) {
			srv := redistest.Start(t)
			cl := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: deadlines, MaxRetries: -1})
			t.Cleanup(func() { cl.Close() })
			lk := newLocker(t, cl, WithNodeTimeout(100*time.Millisecond), WithTTL(10*time.Second))
			other := newLocker(t, srv.Client(t))
			ctx := context.Background()
			for i := range 6 {
				name := fmt.Sprintf("after-pause-%d", i)
				srv.Pause(t)
				_, err := lk.TryLock(ctx, name)
				srv.Resume(t)
				require.ErrorIs(t, err, ErrNotObtained, "TryLock on a paused server")
				takeWithin(t, other, name, time.Now(), time.Second)
			}
		})
	}
}

// TestNameFreeAfterPartition: a grant that ran on the server while the link
// was cut (its reply lost), and whose cleanup the partition swallowed too,
// is released once the link heals: the name is free for another Locker
// within 1s. Before, the one cleanup call was lost with the partition and
// the grant held the name for its whole lease (10s). Both kinds of client:
// at go-redis defaults a cleanup call would otherwise wait out the 3s read
// timeout before its retry.
func TestNameFreeAfterPartition(t *testing.T) {
	t.Parallel()
	for _, deadlines := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", deadlines), func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			proxy := redistest.NewProxy(t, srv.Addr())
			cl := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: deadlines, MaxRetries: -1})
			t.Cleanup(func() { cl.Close() })
			lk := newLocker(t, cl, WithNodeTimeout(100*time.Millisecond), WithTTL(10*time.Second))
			other := newLocker(t, srv.Client(t))
			ctx := context.Background()
			for i := range 3 {
				name := fmt.Sprintf("after-partition-%d", i)
				key := engine.LockKey(lk.c.Cfg.Prefix, name)
				// A connection made fresh under Hold would wait for its
				// handshake's reply and send nothing: the last partition
				// cost the pool its connections, so one is opened (and
				// left idle, the first the pool hands out) before.
				require.NoError(t, cl.Ping(ctx).Err())
				proxy.Hold(true) // the grant runs, its reply waits in the proxy
				tried := make(chan error, 1)
				go func() {
					_, err := lk.TryLock(ctx, name)
					tried <- err
				}()
				require.True(t, eventually(2*time.Second, func() bool { return get(t, admin, key) != "" }), "%s: the grant never ran", name)
				proxy.Blackhole(true) // drops the held reply, and the cleanup
				require.ErrorIs(t, <-tried, ErrNotObtained)
				time.Sleep(300 * time.Millisecond) // the partition lasts
				proxy.Blackhole(false)
				proxy.Hold(false)
				takeWithin(t, other, name, time.Now(), time.Second)
			}
		})
	}
}

// TestReservationForGoneWaiter: a waiting writer whose withdrawal from the
// name's queue was lost to a partition leaves an entry that lives on for a
// few seconds, and the next release reserves the name for it. Nobody will
// claim that reservation: it must lapse within the releaser's node timeout
// (100ms here), not after a second as before, so the name is free for
// others soon after the release.
func TestReservationForGoneWaiter(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { viaProxy.Close() })
	holderLk := newLocker(t, srv.Client(t), WithNodeTimeout(100*time.Millisecond))
	waiterLk := newLocker(t, viaProxy, WithNodeTimeout(100*time.Millisecond), WithRetry(ConstantRetry(time.Hour)))
	other := newLocker(t, srv.Client(t))
	ctx := context.Background()
	holder, err := holderLk.TryLock(ctx, "gone-waiter")
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gaveUp := make(chan error, 1)
	go func() {
		_, err := waiterLk.Lock(wctx, "gone-waiter")
		gaveUp <- err
	}()
	writersQueued(t, srv, "gone-waiter", 1)
	proxy.Blackhole(true) // the withdrawal is lost
	cancel()
	require.ErrorIs(t, <-gaveUp, context.Canceled)
	// The withdrawal runs on after Lock returned (its ctx ended): the
	// partition stays until it has given up.
	require.True(t, eventually(5*time.Second, func() bool { return waiterLk.c.Withdraw.N.Load() == 0 }), "the withdrawal never ended")
	proxy.Blackhole(false)
	writersQueued(t, srv, "gone-waiter", 1) // still queued on the server

	require.NoError(t, holder.Unlock(ctx))
	released := time.Now()
	key := engine.LockKey(holderLk.c.Cfg.Prefix, "gone-waiter")
	assert.Contains(t, get(t, srv.Client(t), key), "queued:", "the release reserved the name for the queued entry")
	// About the node timeout (100ms); before, the reservation lasted 1s.
	takeWithin(t, other, "gone-waiter", released, 500*time.Millisecond)
}

// takeWithin asserts that lk takes name, and releases it, within d of
// since; it waits up to 2s more to say how long it did take.
func takeWithin(t *testing.T, lk *Locker, name string, since time.Time, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	var l *Lock
	var err error
	require.True(t, eventually(d+2*time.Second-time.Since(since), func() bool {
		l, err = lk.TryLock(ctx, name)
		return err == nil
	}), "%s never became free: %v", name, err)
	took := time.Since(since)
	require.NoError(t, l.Unlock(ctx))
	assert.Less(t, took, d, "%s free after %v, want within %v", name, took, d)
}

// TestDeadServerFailsWithinNodeTimeout: a client whose own timeouts are all
// within the node timeout is called without a goroutine of ours, bounded by
// those timeouts; go-redis retries a refused dial (DialerRetries, 5 by
// default, 100ms apart), so the call must carry the node timeout as a ctx
// deadline too. Before, TryLock on a dead port took the retries' ~400ms
// against a 100ms node timeout.
func TestDeadServerFailsWithinNodeTimeout(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t) // nothing listens there now
	const timeout = 100 * time.Millisecond
	cl := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 50 * time.Millisecond, ReadTimeout: 50 * time.Millisecond,
		WriteTimeout: 50 * time.Millisecond, PoolTimeout: 50 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { cl.Close() })
	lk := newLocker(t, cl, WithNodeTimeout(timeout))
	for range 3 {
		start := time.Now()
		_, err := lk.TryLock(context.Background(), "dead")
		took := time.Since(start)
		require.ErrorIs(t, err, ErrNotObtained)
		assert.Less(t, took, 3*timeout, "TryLock on a dead port took %v, node timeout %v", took, timeout)
	}
}

// TestExtendUnansweredKeepsLock: a Locker's Extend that a paused server
// does not answer fails within the node timeout with an error that is not
// ErrNotHeld, and the lock stays held until its current Until: Err nil,
// Until unchanged, Done open.
func TestExtendUnansweredKeepsLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	lk := newLocker(t, cl, WithNodeTimeout(100*time.Millisecond), WithTTL(5*time.Second), WithAutoRenew(false))
	ctx := context.Background()
	l, err := lk.TryLock(ctx, "extend-unanswered")
	require.NoError(t, err)
	until := l.Until()
	srv.Pause(t)
	err = l.Extend(ctx, 10*time.Second)
	srv.Resume(t)
	// The timed-out Extend closed its connection: dial again before the
	// Unlock below, whose 100ms node timeout a slow dial could spend.
	require.NoError(t, cl.Ping(ctx).Err(), "Ping() after Resume")
	require.Error(t, err, "Extend() on a paused server")
	assert.NotErrorIs(t, err, ErrNotHeld, "Extend() on a paused server")
	assert.NoError(t, l.Err(), "Err() after an unanswered Extend")
	assert.Equal(t, until, l.Until(), "Until() after an unanswered Extend")
	select {
	case <-l.Done():
		t.Fatal("Done() closed after an unanswered Extend")
	default:
	}
	require.NoError(t, l.Unlock(ctx))
}

// TestExtendUnansweredShorterLease: an Extend to a shorter lease that a
// paused server did not answer may still run when the server resumes, and
// then the key carries the shorter lease. The lock is valid only until the
// earlier of the two leases, for every kind of hold, so by the time another
// owner can take the name, Err reports the loss: never two valid holders.
// Before, Until kept the longer lease.
func TestExtendUnansweredShorterLease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		take   func(ctx context.Context, lk *Locker, name string) (*Lock, error)
		shared bool // another holder of the same kind is no other owner
	}{
		{name: "lock", take: func(ctx context.Context, lk *Locker, name string) (*Lock, error) { return lk.TryLock(ctx, name) }},
		{name: "read hold", shared: true, take: func(ctx context.Context, lk *Locker, name string) (*Lock, error) { return lk.TryRLock(ctx, name) }},
		{name: "permit", take: func(ctx context.Context, lk *Locker, name string) (*Lock, error) {
			s, err := lk.Semaphore(name, 1)
			if err != nil {
				return nil, err
			}
			return s.TryAcquire(ctx)
		}},
		{name: "LockAll", take: func(ctx context.Context, lk *Locker, name string) (*Lock, error) {
			return lk.TryLockAll(ctx, []string{name + "-a", name + "-b"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			cl := srv.Client(t)
			opts := []Option{WithNodeTimeout(100 * time.Millisecond), WithTTL(20 * time.Second), WithAutoRenew(false)}
			lk := newLocker(t, cl, opts...)
			other := newLocker(t, srv.Client(t), opts...)
			ctx := context.Background()
			const name, shorter = "extend-unanswered-shorter", time.Second
			l, err := tc.take(ctx, lk, name)
			require.NoError(t, err)
			// An Extend first, so that the connection the paused one goes
			// out on is open (some kinds extend in a pipeline, which has
			// connections of its own): the server then has the command in
			// its socket, not a handshake waiting for a reply.
			require.NoError(t, l.Extend(ctx, 20*time.Second))
			srv.Pause(t)
			sent := time.Now()
			err = l.Extend(ctx, shorter)
			srv.Resume(t)
			require.Error(t, err, "Extend() on a paused server")
			assert.NotErrorIs(t, err, ErrNotHeld, "Extend() on a paused server")
			assert.False(t, l.Until().After(sent.Add(shorter)), "Until() %v after an unanswered Extend to %v sent at %v", l.Until(), shorter, sent)
			// The server ran the Extend when it resumed: the shorter lease
			// is the hold's (a read of the server, after the resumed server
			// has run what was waiting in its sockets).
			require.NoError(t, cl.Ping(ctx).Err(), "Ping() after Resume")
			require.True(t, eventually(5*time.Second, func() bool {
				left, err := l.TTL(ctx)
				return err == nil && left > 0 && left <= shorter
			}), "the hold's lease after the server resumed")
			if tc.shared {
				// Readers share, and a writer waits for the lock key's read
				// mark, whose lease an Extend never moves earlier (it lives
				// as long as the longest read hold): no owner can overlap.
				waitDone(t, l, 3*time.Second)
				requireLoss(t, l.Err(), LossExpired)
				return
			}
			// Another owner takes it once the shorter lease ends: by then
			// the first holder reports the loss.
			var nl *Lock
			require.True(t, eventually(5*time.Second, func() bool {
				nl, err = tc.take(ctx, other, name)
				return err == nil
			}), "another owner takes it once the shorter lease ends")
			assert.ErrorIs(t, l.Err(), ErrLost, "the first holder, when another was granted the name")
			require.NoError(t, nl.Unlock(ctx))
		})
	}
}

// TestRehomeDistrustsWhileDialling: while re-homed pub/sub connections are
// being replaced, release messages are not trusted (DESIGN.md "Waiting for a
// busy lock": while the pub/sub connection is down, waiters poll). The old
// connection is retired before the new one dials; with the new one's dial
// held, Trusted stays false the whole time, and turns true once it is
// subscribed again. Before, it was true from the old reader's exit to the
// end of the dial, and a waiter that looked then slept on a capped timer
// through a release nobody heard (TestWaitAcrossFailover with dials slowed).
func TestRehomeDistrustsWhileDialling(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var holdDials atomic.Bool
	dialing := make(chan struct{}, 1)
	release := make(chan struct{})
	var d net.Dialer
	cl := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if holdDials.Load() {
			select {
			case dialing <- struct{}{}:
			default:
			}
			<-release
		}
		return d.DialContext(ctx, network, addr)
	}})
	t.Cleanup(func() { cl.Close() })
	lk := newLocker(t, cl)
	ctx := context.Background()
	holder, err := lk.TryLock(ctx, "rehome-dial")
	require.NoError(t, err)
	// A waiter of the same Locker subscribes the channel.
	go func() {
		w, err := lk.Lock(ctx, "rehome-dial")
		if err == nil {
			_ = w.Unlock(ctx)
		}
	}()
	ps := lk.c.Waits.PS
	ch := rlKey("rehome-dial") + scripts.ChannelSuffix
	require.Eventually(t, func() bool { return ps.Listening(ch) && ps.Trusted() }, 5*time.Second, time.Millisecond, "subscribed")

	holdDials.Store(true)
	ps.Suspect(ch)
	select {
	case <-dialing:
	case <-time.After(5 * time.Second):
		t.Fatal("the re-home never dialled")
	}
	// The old reader exits right after its retirement; the dial is held.
	// What is looked for is the absence of trust over that time.
	trusted := eventuallyEvery(300*time.Millisecond, time.Millisecond, ps.Trusted)
	holdDials.Store(false)
	close(release)
	assert.False(t, trusted, "Trusted() while the re-homed connection was still dialling")
	require.Eventually(t, ps.Trusted, 5*time.Second, time.Millisecond, "trusted again once subscribed")
	require.NoError(t, holder.Unlock(ctx))
}
