package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	goredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redlockgo/redlock"
)

// ---------------------------------------------------------------------------
// Parallel: 16 goroutines of one process, each taking and releasing a name
// of its own (no contention), over one client and one library instance:
// pairs/s, and the server's CPU and commands per pair (the meter), against
// the raw SET NX PX + DEL floor in the same run.

func BenchmarkParallel16(b *testing.B) { parallel(b, 16) }

// BenchmarkParallelSweep is Parallel16 at other numbers of goroutines:
// where overlapping calls start to share round trips, and what a caller
// alone or with a few others pays for it.
func BenchmarkParallelSweep(b *testing.B) {
	for _, g := range []int{1, 2, 4, 8, 32} {
		b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) { parallel(b, g) })
	}
}

// parallel runs every pairLibs row with g goroutines, each on a name of
// its own.
func parallel(b *testing.B, g int) {
	srvs := getServers(b, "single", 1)
	addr := srvs[0].Addr()
	loopbackOnly(b, addr)
	libs := pairLibs(addr)
	for _, l := range libs {
		b.Run(l.name, func(b *testing.B) {
			pair := l.make(b)
			ctx := context.Background()
			base := lockName("parallel-" + l.name)
			names := make([]string, g)
			for i := range names {
				names[i] = fmt.Sprintf("%s:%d", base, i)
				for range warmups / 4 {
					if err := pair(ctx, names[i]); err != nil {
						b.Fatal(err)
					}
				}
			}
			var left atomic.Int64
			left.Store(int64(b.N))
			var wg sync.WaitGroup
			errs := make(chan error, g)
			m := startMeter(b, nil, srvs)
			t0 := time.Now()
			for i := range g {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						if err := pair(ctx, names[i]); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(t0)
			m.stop(b.N, "op")
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "pairs/s")
		})
	}
}

// pairFunc takes and releases name once.
type pairFunc func(ctx context.Context, name string) error

// pairLib is one row of the uncontended pair's comparisons: a library, or
// a floor, made against one server.
type pairLib struct {
	name string
	make func(b *testing.B) pairFunc
}

// pairLibs are the rows of Parallel16 and ServerInstructions against the
// server at addr: the raw SET NX + DEL floor, our scripts alone, ours (Lock
// at go-redis defaults and with ContextTimeoutEnabled; TryLock with fencing
// on and off), bsm/redislock and redsync.
func pairLibs(addr string) []pairLib {
	return []pairLib{
		{"raw-setnx-del", func(b *testing.B) pairFunc {
			c := newGoRedis(b, addr, nil)
			return func(ctx context.Context, name string) error {
				if ok, err := c.SetNX(ctx, name, "v", lockTTL).Result(); err != nil || !ok {
					return fmt.Errorf("SET NX = %v, %v", ok, err)
				}
				return c.Del(ctx, name).Err()
			}
		}},
		// Our scripts without the library: the server's share of our pair.
		{"bare-scripts", func(b *testing.B) pairFunc {
			scripts := loadBareScripts(b)
			c := newGoRedis(b, addr, nil)
			return func(ctx context.Context, name string) error { return scripts.pair(ctx, c, name, false) }
		}},
		{"redlock", func(b *testing.B) pairFunc { return redlockPair(b, newGoRedis(b, addr, nil)) }},
		{"redlock-ctxdl", func(b *testing.B) pairFunc { return redlockPair(b, newCtxDLGoRedis(b, addr, nil)) }},
		// TryLock, the server-cost issue's own measure: a call that never
		// waits sends neither the queue's keys nor a waiter's id.
		{"redlock-trylock", func(b *testing.B) pairFunc { return redlockTryPair(b, newGoRedis(b, addr, nil)) }},
		// The same with fencing off: what the token costs, by difference.
		{"redlock-trylock-nofence", func(b *testing.B) pairFunc {
			return redlockTryPair(b, newGoRedis(b, addr, nil), redlock.WithFencing(false))
		}},
		{"redislock", func(b *testing.B) pairFunc {
			c := redislock.New(newGoRedis(b, addr, nil))
			return func(ctx context.Context, name string) error {
				l, err := c.Obtain(ctx, name, lockTTL, redislockOpts)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}
		}},
		{"redsync", func(b *testing.B) pairFunc {
			rs := redsync.New(goredis.NewPool(newGoRedis(b, addr, nil)))
			return func(ctx context.Context, name string) error {
				m := rs.NewMutex(name, redsync.WithExpiry(lockTTL))
				if err := m.LockContext(ctx); err != nil {
					return err
				}
				if ok, err := m.UnlockContext(ctx); err != nil || !ok {
					return fmt.Errorf("redsync unlock = %v, %v", ok, err)
				}
				return nil
			}
		}},
	}
}

// redlockPair is Lock + Unlock of ours on a Locker over cl, closed when b
// ends.
func redlockPair(b *testing.B, cl *redis.Client) func(ctx context.Context, name string) error {
	lk := benchLocker(b, cl)
	return func(ctx context.Context, name string) error {
		l, err := lk.Lock(ctx, name)
		if err != nil {
			return err
		}
		return l.Unlock(ctx)
	}
}

// redlockTryPair is TryLock + Unlock of ours on a Locker over cl with opts.
func redlockTryPair(b *testing.B, cl *redis.Client, opts ...redlock.Option) func(ctx context.Context, name string) error {
	lk := benchLocker(b, cl, opts...)
	return func(ctx context.Context, name string) error {
		l, err := lk.TryLock(ctx, name)
		if err != nil {
			return err
		}
		return l.Unlock(ctx)
	}
}

// benchLocker is a Locker over cl with opts, closed when b ends.
func benchLocker(b *testing.B, cl *redis.Client, opts ...redlock.Option) *redlock.Locker {
	lk, err := redlock.NewLocker(cl, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { lk.Close() })
	return lk
}
