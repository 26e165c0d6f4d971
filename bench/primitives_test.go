package bench

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redlockgo/redlock"
)

// ---------------------------------------------------------------------------
// Primitives: one acquire + release pair of each shape on a free name, one
// goroutine, one server, go-redis defaults: the exclusive lock next to a
// read hold, a semaphore permit and a two-name LockAll, so the cost of each
// shape reads against Lock/Unlock measured in the same run.

func BenchmarkPrimitives(b *testing.B) {
	srvs := getServers(b, "single", 1)
	loopbackOnly(b, srvs[0].Addr())
	type pair func(ctx context.Context, lk *redlock.Locker, name string) (*redlock.Lock, error)
	shapes := []struct {
		name string
		take pair
	}{
		{"lock-unlock", func(ctx context.Context, lk *redlock.Locker, name string) (*redlock.Lock, error) {
			return lk.Lock(ctx, name)
		}},
		{"rlock-runlock", func(ctx context.Context, lk *redlock.Locker, name string) (*redlock.Lock, error) {
			return lk.RLock(ctx, name)
		}},
		{"acquire-release", func(ctx context.Context, lk *redlock.Locker, name string) (*redlock.Lock, error) {
			sem, err := lk.Semaphore(name, 4)
			if err != nil {
				return nil, err
			}
			return sem.Acquire(ctx)
		}},
		{"lockall2-unlock", func(ctx context.Context, lk *redlock.Locker, name string) (*redlock.Lock, error) {
			return lk.LockAll(ctx, []string{name + ":a", name + ":b"})
		}},
	}
	for _, s := range shapes {
		b.Run(s.name, func(b *testing.B) {
			var cmds atomic.Int64
			lk, err := redlock.NewLocker(newGoRedis(b, srvs[0].Addr(), &cmds))
			if err != nil {
				b.Fatal(err)
			}
			defer lk.Close()
			ctx := context.Background()
			name := lockName("primitives-" + s.name)
			once := func() {
				l, err := s.take(ctx, lk, name)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			timePairs(b, &cmds, srvs, once)
		})
	}
}
