package redlock

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// TestSentinelFollowsLeaderLag: two Lockers on go-redis Sentinel clients
// with default options, A subscribed to the sentinel that leads a planned
// failover, B to another. The leader reports the new master as soon as it
// reconfigures the other replicas, but publishes +switch-master only at
// the end of the failover; a go-redis client subscribed to it kept its
// pooled connections to the demoted (still writable) master until then,
// and A granted names there that B granted on the new master. Once every
// sentinel reports the new master, both Lockers take the same fresh names
// one after the other for 3 s: every name goes to one of them only, after
// at most one node timeout. (Before, the last such name came about 1 s
// after, when the leader ended the failover.)
func TestSentinelFollowsLeaderLag(t *testing.T) {
	t.Parallel()
	const nodeTimeout = 600 * time.Millisecond
	g := redistest.StartSentinel(t, redistest.WithSentinels(3))
	g.AddReplica(t)
	ctx := context.Background()
	mk := func(i int) *Locker {
		cl := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: g.MasterName(), SentinelAddrs: g.SentinelAddrs()[i : i+1]})
		t.Cleanup(func() { _ = cl.Close() })
		return newLocker(t, cl, WithNodeTimeout(nodeTimeout))
	}
	a, b := mk(0), mk(1)
	for _, lk := range []*Locker{a, b} {
		for range 4 { // pooled connections, so that A need not dial later
			l, err := lk.TryLock(ctx, "warm")
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))
		}
	}
	g.Failover(t) // SENTINEL FAILOVER through sentinel 0: it leads
	t0 := time.Now()
	both, late := 0, 0
	var last time.Duration
	for i := 0; time.Since(t0) < 3*time.Second; i++ {
		name := fmt.Sprintf("z-%d", i)
		la, errA := a.TryLock(ctx, name)
		lb, errB := b.TryLock(ctx, name)
		if errA == nil && errB == nil {
			both++
			last = time.Since(t0)
			if last > nodeTimeout {
				late++
			}
		}
		for _, l := range []*Lock{la, lb} {
			if l != nil {
				_ = l.Unlock(ctx)
			}
		}
		time.Sleep(20 * time.Millisecond) // pacing, not synchronisation
	}
	t.Logf("names held by both Lockers after every sentinel reported the new master: %d (the last %v after)", both, last.Round(time.Millisecond))
	assert.Zero(t, late, "names held by both Lockers more than one node timeout after every sentinel reported the new master")
}

// TestSentinelMinReplicasWarning: NewLocker on a go-redis Sentinel client
// warns once when the master accepts writes without replicas
// (min-replicas-to-write 0), and not when it is set; a plain client to the
// same server is not warned.
func TestSentinelMinReplicasWarning(t *testing.T) {
	t.Parallel()
	g := redistest.StartSentinel(t)
	cl := g.FailoverClient(t, nil)
	const msg = "Sentinel master without min-replicas-to-write"
	h := &logRecords{}
	newLocker(t, cl, WithLogger(slog.New(h)), warmedUp)
	assert.True(t, h.logged(slog.LevelWarn, msg), "NewLocker on a Sentinel master with min-replicas-to-write 0")

	g.Master(t).Do(t, "CONFIG", "SET", "min-replicas-to-write", "1")
	h = &logRecords{}
	newLocker(t, cl, WithLogger(slog.New(h)), warmedUp)
	assert.False(t, h.logged(slog.LevelWarn, msg), "NewLocker with min-replicas-to-write 1")

	g.Master(t).Do(t, "CONFIG", "SET", "min-replicas-to-write", "0")
	h = &logRecords{}
	newLocker(t, g.Master(t).Client(t), WithLogger(slog.New(h)), warmedUp)
	assert.False(t, h.logged(slog.LevelWarn, msg), "NewLocker on a plain client")
}
