package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	goredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
	"github.com/redlockgo/redlock"
)

// redislockBackoff is the wait between redislock attempts on a held lock.
// redislock does not retry by default; 8ms is the first wait of our default
// ExponentialRetry(8ms, 512ms), so redislock polls at least as often as we do.
const redislockBackoff = 8 * time.Millisecond

// worker is one contender: its own client (and connection pool) and lock
// library instance, as a separate process would have.
type worker interface {
	// lock acquires name, waiting the library's natural way, and returns
	// the function that releases it.
	lock(ctx context.Context, name string) (unlock func() error, err error)
	close()
}

// lib makes workers of one library on one server; cmds counts the commands
// they send.
type lib struct {
	name      string
	newWorker func(tb testing.TB, addr string, cmds *atomic.Int64) worker
	// shared: all G goroutines use ONE worker (one client and library
	// instance, as goroutines of one process would), instead of one each.
	shared bool
}

// contendedLibs are compared in BenchmarkContended and TestContendedHarness.
// The main rows give every goroutine its own client and library instance,
// like G processes. The -shared rows give all goroutines one instance, like
// G goroutines of one process; only ours and rueidislock coordinate waiters
// inside a process, so only they get such a row (for redsync and redislock
// it would differ only in sharing a connection pool).
var contendedLibs = []lib{
	{name: "redlock", newWorker: newRedlockWorker},
	{name: "redsync", newWorker: newRedsyncWorker},
	{name: "redislock", newWorker: newRedislockWorker},
	{name: "rueidislock", newWorker: newRueidislockWorker},
	{name: "redlock-shared", newWorker: newRedlockWorker, shared: true},
	// The client enforces ctx deadlines itself (ContextTimeoutEnabled), so
	// the library calls it inline instead of from a goroutine per call.
	{name: "redlock-ctxdl-shared", newWorker: newRedlockCtxDLWorker, shared: true},
	{name: "rueidislock-shared", newWorker: newRueidislockWorker, shared: true},
}

// --- ours: Locker with its defaults (TTL 10s, auto-renew, fencing, ExponentialRetry(8ms, 512ms)).

type redlockWorker struct{ lk *redlock.Locker }

func newRedlockWorker(tb testing.TB, addr string, cmds *atomic.Int64) worker {
	lk, err := redlock.NewLocker(newGoRedis(tb, addr, cmds))
	if err != nil {
		tb.Fatal(err)
	}
	return redlockWorker{lk}
}

func newRedlockCtxDLWorker(tb testing.TB, addr string, cmds *atomic.Int64) worker {
	lk, err := redlock.NewLocker(newCtxDLGoRedis(tb, addr, cmds))
	if err != nil {
		tb.Fatal(err)
	}
	return redlockWorker{lk}
}

func (w redlockWorker) lock(ctx context.Context, name string) (func() error, error) {
	l, err := w.lk.Lock(ctx, name)
	if err != nil {
		return nil, err
	}
	return func() error { return l.Unlock(context.Background()) }, nil
}

func (w redlockWorker) close() { w.lk.Close() }

// --- redsync: one pool, expiry set to our TTL, its default retry (32 tries,
// 50-250ms apart).

type redsyncWorker struct{ rs *redsync.Redsync }

func newRedsyncWorker(tb testing.TB, addr string, cmds *atomic.Int64) worker {
	return redsyncWorker{redsync.New(goredis.NewPool(newGoRedis(tb, addr, cmds)))}
}

func (w redsyncWorker) lock(ctx context.Context, name string) (func() error, error) {
	m := w.rs.NewMutex(name, redsync.WithExpiry(lockTTL))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func() error {
		ok, err := m.UnlockContext(context.Background())
		if err == nil && !ok {
			err = errors.New("redsync: unlock reported not released")
		}
		return err
	}, nil
}

func (w redsyncWorker) close() {}

// --- redislock: Obtain with a LinearBackoff retry on a context whose
// deadline is the run's (without one it gives up after one TTL).

type redislockWorker struct{ c *redislock.Client }

func newRedislockWorker(tb testing.TB, addr string, cmds *atomic.Int64) worker {
	return redislockWorker{redislock.New(newGoRedis(tb, addr, cmds))}
}

var redislockOpts = &redislock.Options{RetryStrategy: redislock.LinearBackoff(redislockBackoff)}

func (w redislockWorker) lock(ctx context.Context, name string) (func() error, error) {
	l, err := w.c.Obtain(ctx, name, lockTTL, redislockOpts)
	if err != nil {
		return nil, err
	}
	return func() error { return l.Release(context.Background()) }, nil
}

func (w redislockWorker) close() {}

// --- rueidislock: its own rueidis client (client-side caching on, as it
// needs for its wake-ups), KeyValidity set to our TTL, other options default
// (KeyMajority 2: 2 of 3 keys on the one server). It always auto-renews.

type rueidislockWorker struct{ lk rueidislock.Locker }

func newRueidisLocker(tb testing.TB, addr string, cmds *atomic.Int64) rueidislock.Locker {
	lk, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{addr}},
		KeyValidity:  lockTTL,
		ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
			c, err := rueidis.NewClient(o)
			if err != nil {
				return nil, err
			}
			if cmds == nil {
				return c, nil
			}
			return countingRueidis{c, cmds}, nil
		},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return lk
}

func newRueidislockWorker(tb testing.TB, addr string, cmds *atomic.Int64) worker {
	return rueidislockWorker{newRueidisLocker(tb, addr, cmds)}
}

func (w rueidislockWorker) lock(ctx context.Context, name string) (func() error, error) {
	_, cancel, err := w.lk.WithContext(ctx, name)
	if err != nil {
		return nil, err
	}
	return func() error { cancel(); return nil }, nil
}

func (w rueidislockWorker) close() { w.lk.Close() }
