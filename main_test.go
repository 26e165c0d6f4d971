package redlock

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
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
