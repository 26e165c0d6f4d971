package redlock

import (
	"context"
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

	"github.com/redlockgo/redlock/internal/redistest"
)

// wrappedClient is what a user's own wrapper around go-redis looks like: a
// struct embedding only what it chooses to expose.
type wrappedClient struct {
	redis.Scripter
	inner *redis.Client
}

func (w wrappedClient) Pipeline() redis.Pipeliner { return w.inner.Pipeline() }

func (w wrappedClient) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	return w.inner.Subscribe(ctx, channels...)
}

// Client asks only for what the package calls: a UniversalClient and a
// user's wrapper pass.
var (
	_ Client = redis.UniversalClient(nil)
	_ Client = wrappedClient{}
)

func TestWrappedClientLocks(t *testing.T) {
	t.Parallel()
	cl, _ := miniClient(t)
	lk := newLocker(t, wrappedClient{Scripter: cl, inner: cl})
	ctx := context.Background()
	l, err := lk.TryLock(ctx, "wrapped")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
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
		waiter := waitBehind(t, lk, name)
		released := time.Now()
		require.NoError(t, l.Unlock(ctx))
		w := waiter()
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
	t.Parallel()
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

// TestClientHooksSeeLockCommands: the user's hooks (tracing, metrics) see
// every lock command, on the inline and the goroutine call paths alike.
func TestClientHooksSeeLockCommands(t *testing.T) {
	t.Parallel()
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

			// Renewals of a lock held long enough for loss tracking run on
			// the tracking data connection: through the hooks all the same.
			// A lease of 900 ms, renewed every 300 ms: a loaded machine can
			// delay a renewal past a much shorter lease, and a lost lock
			// has no renewals left to see.
			l, err = lk.TryLock(ctx, "hooked-renewals", WithTTL(900*time.Millisecond))
			require.NoError(t, err)
			require.True(t, eventually(5*time.Second, func() bool { return dataConnScripts(t, srv) > 0 }),
				"renewals on the tracking data connection (the lock's Err: %v)", l.Err())
			piped := hook.piped.Load()
			require.True(t, eventually(5*time.Second, func() bool { return hook.piped.Load()-piped >= 3 }),
				"renewal pipelines seen by the client's hook")
			require.NoError(t, l.Unlock(ctx))
		})
	}
}

// dataConnScripts is how many scripts the tracking data connections of the
// server ran as their last command (CLIENT LIST).
func dataConnScripts(t testing.TB, srv *redistest.Server) (n int) {
	t.Helper()
	list, _ := srv.Do(t, "CLIENT", "LIST").(string)
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " name=redlock-tracking-data ") && strings.Contains(line, " cmd=evalsha") {
			n++
		}
	}
	return n
}

// rebuildHook counts the times go-redis builds its client's hook chain
// (AddHook rebuilds it, calling every hook's DialHook).
type rebuildHook struct{ rebuilds atomic.Int64 }

func (h *rebuildHook) DialHook(next redis.DialHook) redis.DialHook {
	h.rebuilds.Add(1)
	return next
}
func (h *rebuildHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *rebuildHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestHooksAddedLaterSeeLockCommands: at go-redis defaults the scripts run
// inline on a clone of the client with the node timeout, which has none of
// the client's hooks; they still pass through every hook of the client,
// including hooks added after the Locker's first calls, for two Lockers on
// one client alike, and steady locking adds no hooks to the client.
func TestHooksAddedLaterSeeLockCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { cl.Close() })
	a, b := newLocker(t, cl), newLocker(t, cl, WithTTL(3*time.Second)) // two node timeouts: two clones
	ctx := context.Background()
	pair := func(lk *Locker, name string) {
		t.Helper()
		l, err := lk.TryLock(ctx, name)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	pair(a, "later-a")
	pair(b, "later-b")
	for round := range 3 {
		hook := &countingHook{}
		cl.AddHook(hook)
		rebuilds := &rebuildHook{}
		cl.AddHook(rebuilds)
		before := rebuilds.rebuilds.Load()
		for range 5 {
			pair(a, "later-a")
			pair(b, "later-b")
		}
		assert.Equal(t, int64(20), hook.scripts.Load(), "round %d: scripts seen by a hook added after the first calls", round)
		// The first call after AddHook adds one innermost diverter: one
		// rebuild, then none.
		assert.LessOrEqual(t, rebuilds.rebuilds.Load()-before, int64(1), "round %d: hook chain rebuilt by steady locking", round)
	}
}

// TestHooksSeeOverlappingLockCommands: many callers at once on a plain
// client, whose overlapping script calls go out together in pipelines
// (DESIGN.md "Calls to Redis"). Every lock is granted with a token above
// the last one of its name and released, and the client's hooks see each
// script exactly once, alone or in a pipeline: as many as the server ran.
func TestHooksSeeOverlappingLockCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { cl.Close() })
	hook := &countingHook{}
	cl.AddHook(hook)
	// Without loss tracking: a lock that a loaded machine holds 50 ms arms
	// it, and its first read is one more script than the pairs'.
	lk := newLocker(t, cl, WithAutoRenew(false), WithLossTracking(false))
	srv.Do(t, "CONFIG", "RESETSTAT")
	seen := hook.scripts.Load() + hook.pipedScripts.Load()
	const callers, pairs = 32, 20
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			name := "overlap-" + strconv.Itoa(g)
			var last int64
			for i := range pairs {
				l, err := lk.TryLock(ctx, name)
				if !assert.NoError(t, err, "TryLock(%q) #%d", name, i) {
					return
				}
				assert.Greater(t, l.Token(), last, "token of %q #%d", name, i)
				last = l.Token()
				if !assert.NoError(t, l.Unlock(ctx), "Unlock(%q) #%d", name, i) {
					return
				}
			}
			assert.Zero(t, srv.Do(t, "EXISTS", rlKey(name)), "lock key of %q after its last Unlock", name)
		})
	}
	wg.Wait()
	scripts := hook.scripts.Load() + hook.pipedScripts.Load() - seen
	assert.Equal(t, int64(2*callers*pairs), scripts, "scripts the hooks saw")
	assert.Equal(t, 2*callers*pairs, commandCalls(t, srv, "evalsha"), "scripts the server ran")
	t.Logf("%d of %d scripts went in %d pipelines", hook.pipedScripts.Load(), scripts, hook.pipelines.Load())
}

// TestPingWrongPassword: Ping names a wrong password (an ACL user's) with
// the server's refusal; the right one passes.
func TestPingWrongPassword(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.Do(t, "ACL", "SETUSER", "locker", "on", ">secret", "~*", "&*", "+@all")
	ctx := context.Background()
	for _, c := range []struct {
		password string
		ok       bool
	}{{"wrong", false}, {"secret", true}} {
		cl := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "locker", Password: c.password})
		t.Cleanup(func() { cl.Close() })
		err := newLocker(t, cl).Ping(ctx)
		if c.ok {
			assert.NoError(t, err, "Ping() with the right password")
			continue
		}
		assert.ErrorContains(t, err, "WRONGPASS", "Ping() with a wrong password")
	}
}
