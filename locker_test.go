package redlock

import (
	"context"
	"errors"
	"strings"
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
