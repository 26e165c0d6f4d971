package bench

import (
	"context"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	goredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redlockgo/redlock"
)

// BenchmarkInterleaved times the same uncontended acquire + release as
// BenchmarkUncontended and BenchmarkRedlock5, but op by op in rotation: each
// iteration runs one PING and one acquire + release of every library, in an
// order that rotates with the iteration, and each op is timed on its own. On a
// machine shared with other work, load then hits every library alike, and the
// per-op medians (metrics "<lib>-median-us") are far steadier than the means of
// separate benchmarks. ns/op is the time of one whole rotation.
func BenchmarkInterleaved(b *testing.B) {
	b.Run("servers=1", func(b *testing.B) {
		srvs := getServers(b, "single", 1)
		loopbackOnly(b, srvs[0].Addr())
		ops := []namedOp{pingOp(b, srvs[0].Addr()), rawFloorOp(b, srvs[0].Addr())}
		ops = append(ops,
			bareScriptsOp(b, srvs[0].Addr(), false),
			bareScriptsOp(b, srvs[0].Addr(), true),
			redlockOp(b, "redlock", srvs),
			redlockOp(b, "redlock-norenew", srvs, redlock.WithAutoRenew(false)),
			redlockOp(b, "redlock-norenew-nofence", srvs, redlock.WithAutoRenew(false), redlock.WithFencing(false)),
			// Calls run inline on a client with ContextTimeoutEnabled.
			redlockShapeOp(b, "redlock-ctxdl", newCtxDLGoRedis(b, srvs[0].Addr(), nil), func(ctx context.Context, lk *redlock.Locker, name string) (*redlock.Lock, error) {
				return lk.Lock(ctx, name)
			}),
			redlockShapeOp(b, "redlock-rlock", newGoRedis(b, srvs[0].Addr(), nil), func(ctx context.Context, lk *redlock.Locker, name string) (*redlock.Lock, error) {
				return lk.RLock(ctx, name)
			}),
			redlockShapeOp(b, "redlock-semaphore", newGoRedis(b, srvs[0].Addr(), nil), func(ctx context.Context, lk *redlock.Locker, name string) (*redlock.Lock, error) {
				s, err := lk.Semaphore(name, 4)
				if err != nil {
					return nil, err
				}
				return s.Acquire(ctx)
			}),
			redsyncOp(b, "redsync", srvs),
			redislockOp(b, srvs[0].Addr()),
			rueidislockOp(b, srvs[0].Addr()),
		)
		interleave(b, ops)
	})
	b.Run("servers=5", func(b *testing.B) {
		srvs := getServers(b, "five", 5)
		loopbackOnly(b, addrs(srvs)...)
		ops := []namedOp{pingOp(b, srvs[0].Addr())}
		ops = append(ops,
			redlockOp(b, "redlock", srvs),
			redlockOp(b, "redlock-norenew", srvs, redlock.WithAutoRenew(false)),
			redlockOp(b, "redlock-norenew-nofence", srvs, redlock.WithAutoRenew(false), redlock.WithFencing(false)),
			bareRedlockOp(b, srvs),
			redsyncOp(b, "redsync", srvs),
			redsyncOp(b, "redsync-failfast", srvs, redsync.WithFailFast(true)),
		)
		interleave(b, ops)
	})
}

// namedOp is one timed operation of the rotation; it fails tb itself.
type namedOp struct {
	name string
	do   func()
}

func interleave(b *testing.B, ops []namedOp) {
	for range warmups {
		for _, o := range ops {
			o.do()
		}
	}
	lat := make([][]time.Duration, len(ops))
	for i := range lat {
		lat[i] = make([]time.Duration, 0, b.N)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range ops {
			k := (i + j) % len(ops)
			t := time.Now()
			ops[k].do()
			lat[k] = append(lat[k], time.Since(t))
		}
	}
	b.StopTimer()
	for k, o := range ops {
		b.ReportMetric(float64(median(lat[k]).Nanoseconds())/1e3, o.name+"-median-us")
	}
}

func pingOp(b *testing.B, addr string) namedOp {
	c := newGoRedis(b, addr, nil)
	return namedOp{"ping", func() {
		if err := c.Ping(context.Background()).Err(); err != nil {
			b.Fatal(err)
		}
	}}
}

// rawFloorOp is the floor of any Redis lock: SET NX PX of a fixed value,
// then DEL, with no ownership check and no token.
func rawFloorOp(b *testing.B, addr string) namedOp {
	c := newGoRedis(b, addr, nil)
	key := lockName("interleaved-raw")
	ctx := context.Background()
	return namedOp{"raw-setnx-del", func() {
		if ok, err := c.SetNX(ctx, key, "v", 10*time.Second).Result(); err != nil || !ok {
			b.Fatalf("SET NX = %v, %v", ok, err)
		}
		if err := c.Del(ctx, key).Err(); err != nil {
			b.Fatal(err)
		}
	}}
}

// bareScriptsOp is bareScripts.pair in the rotation: what our scripts
// cost without the library around them, inline or, with inGoroutine, from a
// goroutine per call.
func bareScriptsOp(b *testing.B, addr string, inGoroutine bool) namedOp {
	scripts := loadBareScripts(b)
	c := newGoRedis(b, addr, nil)
	name := "bare-scripts"
	if inGoroutine {
		name += "-goroutine"
	}
	key := lockName("interleaved-" + name)
	ctx := context.Background()
	return namedOp{name, func() {
		if err := scripts.pair(ctx, c, key, inGoroutine); err != nil {
			b.Fatal(err)
		}
	}}
}

// bareRedlockOp is bareRedlockPair in the rotation: our scripts' share of a
// Redlock pair's time.
func bareRedlockOp(b *testing.B, srvs []*server) namedOp {
	pair := bareRedlockPair(b, srvs)
	return namedOp{"bare-scripts-redlock", func() {
		if err := pair(); err != nil {
			b.Fatal(err)
		}
	}}
}

func redlockOp(b *testing.B, name string, srvs []*server, opts ...redlock.Option) namedOp {
	var clients []redlock.Client
	for _, s := range srvs {
		clients = append(clients, newGoRedis(b, s.Addr(), nil))
	}
	var lock func(context.Context, string, ...redlock.Option) (*redlock.Lock, error)
	if len(clients) == 1 {
		lk, err := redlock.NewLocker(clients[0], opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { lk.Close() })
		lock = lk.Lock
	} else {
		rl, err := redlock.NewRedlock(clients, opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { rl.Close() })
		lock = rl.Lock
	}
	key := lockName("interleaved-" + name)
	ctx := context.Background()
	return namedOp{name, func() {
		l, err := lock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}}
}

// redlockShapeOp is an acquire + release of ours by take (a Lock, a read
// hold, a semaphore permit) on a Locker over cl.
func redlockShapeOp(b *testing.B, name string, cl *redis.Client, take func(context.Context, *redlock.Locker, string) (*redlock.Lock, error)) namedOp {
	lk, err := redlock.NewLocker(cl)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { lk.Close() })
	key := lockName("interleaved-" + name)
	ctx := context.Background()
	return namedOp{name, func() {
		l, err := take(ctx, lk, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}}
}

func redsyncOp(b *testing.B, name string, srvs []*server, opts ...redsync.Option) namedOp {
	var pools []rsredis.Pool
	for _, s := range srvs {
		pools = append(pools, goredis.NewPool(newGoRedis(b, s.Addr(), nil)))
	}
	rs := redsync.New(pools...)
	key := lockName("interleaved-" + name)
	ctx := context.Background()
	opts = append([]redsync.Option{redsync.WithExpiry(lockTTL)}, opts...)
	return namedOp{name, func() {
		m := rs.NewMutex(key, opts...)
		if err := m.LockContext(ctx); err != nil {
			b.Fatal(err)
		}
		if ok, err := m.UnlockContext(ctx); err != nil || !ok {
			b.Fatalf("redsync unlock = %v, %v", ok, err)
		}
	}}
}

func redislockOp(b *testing.B, addr string) namedOp {
	c := redislock.New(newGoRedis(b, addr, nil))
	key := lockName("interleaved-redislock")
	ctx := context.Background()
	return namedOp{"redislock", func() {
		l, err := c.Obtain(ctx, key, lockTTL, redislockOpts)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}}
}

func rueidislockOp(b *testing.B, addr string) namedOp {
	lk := newRueidisLocker(b, addr, nil)
	b.Cleanup(lk.Close)
	key := lockName("interleaved-rueidislock")
	ctx := context.Background()
	return namedOp{"rueidislock", func() {
		_, cancel, err := lk.WithContext(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		cancel()
	}}
}
