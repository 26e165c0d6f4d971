package redlock

import (
	"context"
	"fmt"
	"strings"
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
