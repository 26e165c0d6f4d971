package redlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
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
// leaves it asleep for its capped sleep), the one right after the slot
// moved included.
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
				// before the waiter's subscription does; its subscription
				// there then wakes it (TestClusterWaiterAfterSlotMove).
				assert.Less(t, waits[migrateAt], time.Second, "wake after the release that followed the migration")
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

// TestClusterLockHeldThroughMigration: a lock held with auto-renewal (TTL
// 1s, with metadata) stays held while its slot migrates key by key, in each
// phase: the fence counter moved and the lock key not (a script declaring
// both gets TRYAGAIN), the lock key moved and the rest not, every key
// moved but the slot not handed over (ASK), and handed over (MOVED). All
// through, Done stays open and a second Locker is refused; after, Unlock
// succeeds, the next token is larger, and a free name of the migrated slot
// is taken within 1s of the hand-over.
func TestClusterLockHeldThroughMigration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		first func(name string) []string // the keys moved first, one by one
	}{
		{"counter first", func(name string) []string { return []string{rlKey(name) + fenceSuffix} }},
		{"lock key first", func(name string) []string { return []string{rlKey(name)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := redistest.StartCluster(t, 3)
			const ttl, window = time.Second, 3 * time.Second
			holder := newLocker(t, c.Client(t), WithTTL(ttl))
			contender := newLocker(t, c.Client(t), WithTTL(ttl))
			name := "migrating-" + strings.ReplaceAll(tc.name, " ", "-")
			key := rlKey(name)
			slot := int(c.Masters[0].Do(t, "CLUSTER", "KEYSLOT", key).(int64))
			free := nameInSlot(t, c, slot, "free-")
			from := c.Owner(t, slot)
			to := (from + 1) % 3

			l, err := holder.Lock(ctx, name, WithMetadata("holder"))
			require.NoError(t, err)
			tried := triedAgain.Load()
			m := c.BeginMigration(t, slot, from, to)
			heldThrough(t, "migrating, nothing moved", l, contender, name, window)
			m.Move(t, tc.first(name)...)
			heldThrough(t, "first key moved", l, contender, name, window)
			m.Move(t, m.Left(t)...)
			heldThrough(t, "every key moved, slot not handed over (ASK)", l, contender, name, window)
			m.Finish(t)
			handed := time.Now()
			var fl *Lock
			for i := 0; i < 200 && fl == nil && time.Since(handed) < time.Second; i++ {
				fl, err = contender.TryLock(ctx, free)
			}
			require.NoError(t, err, "TryLock(%q) after the hand-over", free)
			took := time.Since(handed)
			require.NoError(t, fl.Unlock(ctx))
			heldThrough(t, "handed over (MOVED)", l, contender, name, window)
			require.Equal(t, to, c.Owner(t, slot), "slot %d's master after the migration", slot)

			h, err := contender.Inspect(ctx, name)
			require.NoError(t, err)
			assert.Equal(t, "holder", h.Metadata, "Inspect().Metadata after the migration")
			assert.Equal(t, l.Token(), h.Token, "Inspect().Token after the migration")
			require.NoError(t, l.Unlock(ctx), "Unlock() after the migration")
			next, err := contender.TryLock(ctx, name)
			require.NoError(t, err)
			assert.Greater(t, next.Token(), l.Token(), "the next holder's token")
			require.NoError(t, next.Unlock(ctx))
			t.Logf("%s: held through %v of migration; free name taken %v after the hand-over; TRYAGAIN retries (all tests so far) %d",
				tc.name, 4*window, took, triedAgain.Load()-tried)
			assert.Less(t, took, time.Second, "a free name of the migrated slot taken after the hand-over")
		})
	}
}

// heldThrough checks, for window, that l stays held (Done open) and that
// contender is refused its name.
func heldThrough(t *testing.T, phase string, l *Lock, contender *Locker, name string, window time.Duration) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	refused := 0
	for i := 0; i < 1000 && time.Since(start) < window; i++ {
		select {
		case <-l.Done():
			t.Fatalf("%s: lost after %v: %v", phase, time.Since(start), l.Err())
		default:
		}
		other, err := contender.TryLock(ctx, name)
		if err == nil {
			_ = other.Unlock(ctx)
			t.Fatalf("%s: a second Locker took %q after %v", phase, name, time.Since(start))
		}
		require.ErrorIs(t, err, ErrNotObtained, "%s: the second Locker's TryLock", phase)
		refused++
		select {
		case <-l.Done():
			t.Fatalf("%s: lost after %v: %v", phase, time.Since(start), l.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	require.NoError(t, l.Err(), "%s: Err() after %v", phase, window)
	t.Logf("%s: held for %v, the second Locker refused %d times", phase, time.Since(start), refused)
}

// nameInSlot returns a lock name (default prefix) whose key hashes to slot.
func nameInSlot(t *testing.T, c *redistest.Cluster, slot int, prefix string) string {
	t.Helper()
	for i := range 1 << 20 { // bounded: one in 16384 names fits
		name := fmt.Sprintf("%s%d", prefix, i)
		if int(crc16([]byte("redlock:"+name))%16384) == slot {
			require.Equal(t, int64(slot), c.Masters[0].Do(t, "CLUSTER", "KEYSLOT", rlKey(name)), "KEYSLOT of %s", rlKey(name))
			return name
		}
	}
	t.Fatalf("no name in slot %d", slot)
	return ""
}

// crc16 is Redis Cluster's key hash (CRC16-XMODEM).
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// TestClusterWaiterAfterSlotMove: a waiter that trusts release messages (a
// retry policy of an hour, so that nothing but a message or its own
// subscription wakes it) waits on a Cluster name whose slot then moves to
// another master; the holder releases right after the hand-over, before
// the waiter's subscription has followed the slot (it re-subscribes 50 ms
// after the old shard's sunsubscribe). The release is heard by nobody, and
// the waiter used to sleep on; now its re-subscription wakes it, and it
// gets the lock at once.
func TestClusterWaiterAfterSlotMove(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	holder := newLocker(t, c.Client(t))
	waiter := newLocker(t, c.Client(t), WithRetry(ConstantRetry(time.Hour)))
	const name = "cluster-moved-waiter"
	slot := int(c.Masters[0].Do(t, "CLUSTER", "KEYSLOT", lockKey("redlock:", name)).(int64))
	from := c.Owner(t, slot)
	ctx := context.Background()
	l, err := holder.TryLock(ctx, name)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		wl, err := waiter.Lock(wctx, name)
		if err == nil {
			err = wl.Unlock(ctx)
		}
		got <- err
	}()
	ch := releaseChannel(lockKey("redlock:", name))
	require.True(t, eventually(5*time.Second, func() bool { return waiter.c.waits.ps.listening(ch) }), "the waiter subscribed")
	c.Migrate(t, slot, from, (from+1)%3)
	start := time.Now()
	require.NoError(t, l.Unlock(ctx))
	select {
	case err := <-got:
		require.NoError(t, err)
		t.Logf("the waiter got the lock %v after the release that followed the slot move", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the lock within 5s of the release that followed the slot move")
	}
}
