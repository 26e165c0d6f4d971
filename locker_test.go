package redlock

import (
	"context"
	"errors"
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

func TestDoLoss(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	lk := newLocker(t, cl, WithTTL(2*time.Second), WithRenewInterval(50*time.Millisecond))
	ctx := context.Background()
	var cause error
	err := lk.Do(ctx, "do-loss", func(fctx context.Context) error {
		cl.Del(ctx, "{redlock:do-loss}") // someone breaks the lock
		select {
		case <-fctx.Done():
			cause = context.Cause(fctx)
		case <-time.After(3 * time.Second):
			t.Errorf("fn's ctx not cancelled after the lock was lost")
		}
		return nil // fn "succeeds", Do must still report the loss
	})
	if !errors.Is(err, ErrLost) {
		t.Errorf("Do() = %v, want ErrLost", err)
	}
	if !errors.Is(cause, ErrLost) {
		t.Errorf("cause of fn's ctx = %v, want ErrLost", cause)
	}

	if _, ok := FromContext(ctx); ok {
		t.Errorf("FromContext(plain ctx) reported a lock")
	}
	if err := lk.Do(ctx, "do-from-ctx", func(fctx context.Context) error {
		l, ok := FromContext(fctx)
		if !ok || l.Name() != "do-from-ctx" || l.Err() != nil || get(t, cl, "{redlock:do-from-ctx}") != l.Owner() {
			t.Errorf("FromContext(fn ctx) = %v, %v; want the held lock", l, ok)
		}
		return nil
	}); err != nil {
		t.Errorf("Do() = %v", err)
	}

	fnErr := errors.New("fn failed")
	if err := lk.Do(ctx, "do-err", func(context.Context) error { return fnErr }); !errors.Is(err, fnErr) || errors.Is(err, ErrLost) {
		t.Errorf("Do() = %v, want fn's error and no ErrLost", err)
	}
	if n := cl.Exists(ctx, "{redlock:do-err}").Val(); n != 0 {
		t.Errorf("key after Do = %d, want released", n)
	}
}

func TestDoPanicReleases(t *testing.T) {
	t.Parallel()
	cl, mr := miniClient(t)
	lk := newLocker(t, cl)
	defer func() {
		if p := recover(); p != "boom" {
			t.Errorf("recover() = %v, want the panic to go on after release", p)
		}
		if mr.Exists("{redlock:panics}") {
			t.Errorf("key after panicking Do still held, want released")
		}
	}()
	_ = lk.Do(context.Background(), "panics", func(context.Context) error { panic("boom") })
}

// TestDoCancelledByUnlockThroughContext: fn's ctx also ends when fn's lock
// is released through FromContext, and Do then returns fn's result.
func TestDoCancelledByUnlockThroughContext(t *testing.T) {
	t.Parallel()
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

// TestNilLocker: a nil or zero Locker or Redlock returns errors, never
// panics.
func TestNilLocker(t *testing.T) {
	t.Parallel()
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

// TestPing: Ping passes on a writable master and names the cause on a
// replica, a closed port and a port that is not Redis; a Redlock passes with
// a quorum of masters and fails without one.
func TestPing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	master := redistest.Start(t)
	require.NoError(t, newLocker(t, master.Client(t)).Ping(ctx))

	host, port, _ := strings.Cut(master.Addr(), ":")
	replica := redistest.Start(t, "--replicaof", host, port)
	err := newLocker(t, replica.Client(t)).Ping(ctx)
	assert.True(t, redis.IsReadOnlyError(err), "Ping() on a replica = %v", err)

	closed := redis.NewClient(&redis.Options{Addr: closedAddr(t)})
	t.Cleanup(func() { closed.Close() })
	err = newLocker(t, closed, WithNodeTimeout(2*time.Second)).Ping(ctx)
	var ne *NodeError
	require.ErrorAs(t, err, &ne)
	assert.Contains(t, err.Error(), "refused")

	http := redis.NewClient(&redis.Options{Addr: httpAddr(t)})
	t.Cleanup(func() { http.Close() })
	err = newLocker(t, http).Ping(ctx)
	assert.ErrorContains(t, err, "can't parse")

	nodes := redistest.StartN(t, 3)
	rl, err := NewRedlock([]Client{nodes[0].Client(t), nodes[1].Client(t), nodes[2].Client(t)}, WithNodeTimeout(200*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { rl.Close() })
	nodes[2].Kill(t)
	require.NoError(t, rl.Ping(ctx), "a quorum of masters is enough")
	nodes[1].Kill(t)
	err = rl.Ping(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "1 of 3 nodes")
	var nilLocker *Locker
	assert.Error(t, nilLocker.Ping(ctx))
}

// TestDoLossFoundByRelease: fn deletes its own lock's key and returns nil;
// Do still returns an error matching ErrLost (Locker.Do's doc, locker.go:
// "or when the release found the key no longer ours ..., even when fn
// returned nil"). Without the tracking connection nothing hears of the
// deletion before fn returns (the first renewal is seconds away): the
// release is what finds it. With the defaults either may find it first;
// the promise is the same.
func TestDoLossFoundByRelease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name, lock string
		opts       []Option
	}{
		{"release finds it", "do-gone-untracked", []Option{WithLossTracking(false)}},
		{"defaults", "do-gone-defaults", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lk := newLocker(t, srv.Client(t), tc.opts...)
			var key string
			err := lk.Do(ctx, tc.lock, func(fctx context.Context) error {
				l, ok := FromContext(fctx)
				require.True(t, ok, "FromContext(fn ctx)")
				key = l.Key()
				n, err := admin.Del(ctx, key).Result()
				require.NoError(t, err)
				require.Equal(t, int64(1), n, "DEL %s", key)
				return nil // fn "succeeds": Do must still report the loss
			})
			assert.ErrorIs(t, err, ErrLost, "Do() = %v, want ErrLost", err)
			assert.Equal(t, "", get(t, admin, key), "lock key after Do")
		})
	}
}

// gateHook holds the scripts a client sends, once armed, until open is
// called: a call stays in flight as long as the test needs.
type gateHook struct {
	armed   atomic.Bool
	entered chan struct{} // closed when the first script is held
	gate    chan struct{}
	once    sync.Once
	opened  sync.Once
}

func newGateHook() *gateHook {
	return &gateHook{entered: make(chan struct{}), gate: make(chan struct{})}
}

func (h *gateHook) open() { h.opened.Do(func() { close(h.gate) }) }

func (h *gateHook) hold(ctx context.Context, cmds ...redis.Cmder) error {
	if !h.armed.Load() {
		return nil
	}
	for _, cmd := range cmds {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.once.Do(func() { close(h.entered) })
			select {
			case <-h.gate:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.hold(ctx, cmd); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.hold(ctx, cmds...); err != nil {
			return err
		}
		return next(ctx, cmds)
	}
}

// waitsIn reports whether a goroutine that the test function creator
// started is parked on a channel receive in fn itself (its innermost frame).
func waitsIn(fn, creator string) bool {
	for _, g := range strings.Split(allStacks(), "\n\n") {
		lines := strings.SplitN(g, "\n", 3)
		if len(lines) == 3 && strings.Contains(lines[0], "[chan receive") &&
			strings.HasPrefix(lines[1], fn+"(") && strings.Contains(g, "created by "+creator+" ") {
			return true
		}
	}
	return false
}

// TestCloseConcurrentWaitsForFirst: a second Close, called while the first
// one's release is still in flight, returns only when the first does
// (Locker.Close's doc, locker.go: "a concurrent second Close returns when
// the first does"): when it returns, the first Close's release has run on
// the server. The first Close's release script is held in a client hook
// until the second Close is seen parked in Close, or has returned (which
// fails the test, the key still being there).
func TestCloseConcurrentWaitsForFirst(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	cl := srv.Client(t)
	h := newGateHook()
	cl.AddHook(h)
	defer h.open()
	// A node timeout far above the test's few milliseconds of holding:
	// the first Close waits for its release instead of leaving it to the
	// background.
	lk := newLocker(t, cl, WithTTL(30*time.Second), WithNodeTimeout(5*time.Second), WithLossTracking(false))
	ctx := context.Background()
	l, err := lk.TryLock(ctx, "close-twice")
	require.NoError(t, err)

	h.armed.Store(true)
	first := make(chan struct{})
	go func() {
		defer close(first)
		assert.NoError(t, lk.Close(), "first Close()")
	}()
	select {
	case <-h.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the first Close sent no release")
	}
	waitDone(t, l, 5*time.Second) // the first Close has begun: the lock is marked released

	second := make(chan int64, 1)
	go func() {
		assert.NoError(t, lk.Close(), "second Close()")
		n, err := admin.Exists(ctx, l.Key()).Result()
		assert.NoError(t, err)
		second <- n
	}()
	creator := "github.com/redlockgo/redlock.TestCloseConcurrentWaitsForFirst"
	require.True(t, eventually(5*time.Second, func() bool {
		return len(second) > 0 || waitsIn("github.com/redlockgo/redlock/internal/engine.(*Core).Close", creator)
	}), "the second Close neither returned nor waited in Close")
	h.open()
	select {
	case n := <-second:
		assert.Zero(t, n, "lock keys when the second Close returned = %d, want 0 (released by the first Close)", n)
	case <-time.After(5 * time.Second):
		t.Fatal("the second Close did not return")
	}
	select {
	case <-first:
	case <-time.After(5 * time.Second):
		t.Fatal("the first Close did not return")
	}
}
