package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redlockgo/redlock/internal/redistest"
)

// TestMain fails the run if any goroutine outlives the tests: every Locker
// and Redlock is closed, every client closed, every server stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newLocker returns a Locker on client, closed when the test ends.
func newLocker(t testing.TB, client Client, opts ...Option) *Locker {
	t.Helper()
	lk, err := NewLocker(client, opts...)
	if err != nil {
		t.Fatalf("NewLocker() = %v", err)
	}
	t.Cleanup(func() { lk.Close() })
	return lk
}

// miniClient returns a client to a fresh miniredis and the server.
func miniClient(t testing.TB) (*redis.Client, *miniredis.Miniredis) {
	t.Helper()
	mr := miniredis.RunT(t)
	cl := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { cl.Close() })
	return cl, mr
}

// get reads a key for assertions; "" when it does not exist.
func get(t testing.TB, cl *redis.Client, key string) string {
	t.Helper()
	v, err := cl.Get(context.Background(), key).Result()
	if err != nil && err != redis.Nil {
		t.Fatalf("GET %s = %v", key, err)
	}
	return v
}

// startCluster starts a one-node Redis Cluster owning every slot and returns
// a ClusterClient to it. One node is enough to catch CROSSSLOT: cluster mode
// refuses a script whose keys hash to different slots on any node count.
func startCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	srv := redistest.Start(t, "--cluster-enabled", "yes")
	srv.Do(t, "CLUSTER", "ADDSLOTSRANGE", "0", "16383")
	// Polls an external process until it reports the cluster ready.
	if !eventuallyEvery(10*time.Second, 50*time.Millisecond, func() bool {
		return strings.Contains(fmt.Sprint(srv.Do(t, "CLUSTER", "INFO")), "cluster_state:ok")
	}) {
		t.Fatalf("cluster state not ok after 10s: %v", srv.Do(t, "CLUSTER", "INFO"))
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}, MaxRedirects: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// acquirer is the acquire call of a Locker or a Redlock.
type acquirer interface {
	Lock(ctx context.Context, name string, opts ...Option) (*Lock, error)
}

// hammered is what hammer recorded.
type hammered struct {
	tokens []int64         // in order of holding
	waits  []time.Duration // how long each Lock call waited
}

// hammer runs workers goroutines that each take the lock name iters times
// and, while holding it, increment key on cl with a non-atomic GET then SET:
// two holders at once would lose an update. It fails the test on any error,
// on an overlap, on a wrong final count, and on tokens that do not strictly
// increase in the order the lock was held.
func hammer(t *testing.T, lk acquirer, cl *redis.Client, name, key string, workers, iters int) hammered {
	t.Helper()
	ctx := context.Background()
	var (
		mu       sync.Mutex
		rec      hammered
		inside   atomic.Int32
		overlaps atomic.Int32
		wg       sync.WaitGroup
		errs     = make(chan error, workers)
	)
	for range workers {
		wg.Go(func() {
			for range iters {
				lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				t0 := time.Now()
				l, err := lk.Lock(lctx, name)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("Lock() = %w", err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				rec.tokens = append(rec.tokens, l.Token())
				rec.waits = append(rec.waits, time.Since(t0))
				mu.Unlock()
				n, err := cl.Get(ctx, key).Int()
				if err != nil && !errors.Is(err, redis.Nil) {
					errs <- err
					return
				}
				if err := cl.Set(ctx, key, n+1, 0).Err(); err != nil {
					errs <- err
					return
				}
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					errs <- fmt.Errorf("Unlock() = %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("worker: %v", err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d times two holders were inside the critical section at once, want 0", n)
	}
	if got := get(t, cl, key); got != strconv.Itoa(workers*iters) {
		t.Errorf("counter = %s, want %d", got, workers*iters)
	}
	for i := 1; i < len(rec.tokens); i++ {
		if rec.tokens[i] <= rec.tokens[i-1] {
			t.Fatalf("token %d = %d after %d, want strictly increasing in order of holding", i, rec.tokens[i], rec.tokens[i-1])
		}
	}
	return rec
}
