package redlock

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// handOffs passes name back and forth between two Lockers n times: each
// round the holder releases while the other waits in Lock, listening for
// the release. It returns how long after each Unlock began the waiter held
// the lock; before round migrateAt (if >= 0), migrate runs while the waiter
// waits.
func handOffs(t *testing.T, lks [2]*Locker, name string, n, migrateAt int, migrate func()) []time.Duration {
	t.Helper()
	ctx := context.Background()
	cur, err := lks[0].Lock(ctx, name)
	require.NoError(t, err)
	_, channel := keyAndChannel("redlock:", name)
	waits := make([]time.Duration, 0, n)
	for i := range n {
		waiter := lks[(i+1)%2]
		type got struct {
			l   *Lock
			at  time.Time
			err error
		}
		ch := make(chan got, 1)
		go func() {
			l, err := waiter.Lock(ctx, name)
			ch <- got{l, time.Now(), err}
		}()
		require.Eventually(t, func() bool { return waiter.core().waits.ps.listening(channel) }, 10*time.Second, time.Millisecond,
			"round %d: the waiter's subscription", i)
		if i == migrateAt {
			migrate()
		}
		released := time.Now()
		require.NoError(t, cur.Unlock(ctx), "round %d", i)
		var g got
		select {
		case g = <-ch:
		case <-time.After(15 * time.Second):
			t.Fatalf("round %d: waiter not woken within 15s of the release", i)
		}
		require.NoError(t, g.err, "round %d", i)
		waits = append(waits, g.at.Sub(released))
		if i == migrateAt {
		}
		cur = g.l
	}
	require.NoError(t, cur.Unlock(ctx))
	return waits
}

// TestClusterReleasesStayOnShard: on a 3-master Cluster, 200 hand-offs of
// one name between two Lockers send no PUBLISH over the cluster bus (at
// most 10, summed over the masters' cluster_stats_messages_publish_sent):
// releases use sharded pub/sub. The waiter is still woken by the release:
// half the hand-offs within 50 ms, none after a second (a missed release
// leaves it asleep for its capped sleep), except the one right after the
// slot moved, which may be missed once.
func TestClusterReleasesStayOnShard(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		migrate bool
	}{{"steady", false}, {"slot migration", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := redistest.StartCluster(t, 3)
			lks := [2]*Locker{newLocker(t, c.Client(t)), newLocker(t, c.Client(t))}
			const name, rounds = "cluster-handoff", 200
			slot := int(c.Masters[0].Do(t, "CLUSTER", "KEYSLOT", lockKey("redlock:", name)).(int64))
			from := c.Owner(t, slot)
			migrateAt := -1
			if tc.migrate {
				migrateAt = rounds / 2
			}
			before := c.PublishSent(t)
			waits := handOffs(t, lks, name, rounds, migrateAt, func() { c.Migrate(t, slot, from, (from+1)%3) })
			sent := c.PublishSent(t) - before
			if tc.migrate {
				require.Equal(t, (from+1)%3, c.Owner(t, slot), "slot %d's master after the migration", slot)
			}
			if tc.migrate {
				// The release right after the move can reach the new shard
				// before the waiter's subscription does; the waiter then
				// wakes by its capped sleep (maxTrustedSleep).
				assert.Less(t, waits[migrateAt], maxTrustedSleep+time.Second, "wake after the release that followed the migration")
				waits = slices.Delete(waits, migrateAt, migrateAt+1)
			}
			slices.Sort(waits)
			t.Logf("%d hand-offs: %d PUBLISH messages on the cluster bus; wake after release: median %v, p90 %v, max %v",
				rounds, sent, waits[len(waits)/2], waits[len(waits)*9/10], waits[len(waits)-1])
			assert.LessOrEqual(t, sent, int64(10), "PUBLISH messages on the cluster bus for %d hand-offs", rounds)
			assert.LessOrEqual(t, waits[len(waits)/2], 50*time.Millisecond, "median wake after a release")
			assert.Less(t, waits[len(waits)-1], time.Second, "longest wake after a release")
		})
	}
}
