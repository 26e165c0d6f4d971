package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/history"
	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/internal/scripts"
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
	_, channel := engine.KeyAndChannel("redlock:", name)
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
		require.Eventually(t, func() bool { return waiter.core().Waits.PS.Listening(channel) }, 10*time.Second, time.Millisecond,
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
			slot := int(c.Masters[0].Do(t, "CLUSTER", "KEYSLOT", engine.LockKey("redlock:", name)).(int64))
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
		{"counter first", func(name string) []string { return []string{rlKey(name) + scripts.FenceSuffix} }},
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
			tried := node.TriedAgain.Load()
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
				tc.name, 4*window, took, node.TriedAgain.Load()-tried)
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
	slot := int(c.Masters[0].Do(t, "CLUSTER", "KEYSLOT", engine.LockKey("redlock:", name)).(int64))
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
	ch := engine.ReleaseChannel(engine.LockKey("redlock:", name))
	require.True(t, eventually(5*time.Second, func() bool { return waiter.c.Waits.PS.Listening(ch) }), "the waiter subscribed")
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

// contender is a second Locker trying a name every 20 ms in a goroutine of
// its own, recording every grant in the scene's history (and releasing it
// at once) and every error that does not match ErrNotObtained.
type contender struct {
	stop chan struct{}
	done chan struct{}

	granted atomic.Int32 // grants so far, for polls while it runs
	last    atomic.Value // the last refusal's text

	// Read after done closes.
	tries  int
	odd    []error // errors that are not ErrNotObtained
	tokens []int64 // of each grant
	first  *history.Acquisition
}

func contend(s *scene, lk *Locker, name string) *contender {
	c := &contender{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		ctx := context.Background()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			l, err := lk.TryLock(ctx, name)
			c.tries++
			if a := s.took(l, err); a != nil {
				c.tokens = append(c.tokens, l.Token())
				if c.first == nil {
					c.first = a
				}
				c.granted.Add(1)
				if err := s.write(l); err != nil {
					c.odd = append(c.odd, fmt.Errorf("fenced write of a grant: %w", err))
				}
				if err := s.rec.unlock(ctx, a, l); err != nil {
					c.odd = append(c.odd, fmt.Errorf("Unlock() of a grant: %w", err))
				}
			} else if !errors.Is(err, ErrNotObtained) {
				c.odd = append(c.odd, err)
			} else {
				c.last.Store(err.Error())
			}
			select {
			case <-c.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return c
}

// end stops the contender and waits for it.
func (c *contender) end() {
	close(c.stop)
	<-c.done
}

// renewedAfter reports whether a renewal recorded in log that started
// after t succeeded.
func renewedAfter(log *eventLog, t time.Time) bool {
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, e := range log.renews {
		if !e.Manual && e.Err == nil && e.Start.After(t) {
			return true
		}
	}
	return false
}

// renewalGap returns, from the renewals recorded in log that ended after
// from, the longest time between the ends of two successful ones (how long
// the lease went unrenewed), and how many failed.
func renewalGap(log *eventLog, from time.Time) (gap time.Duration, failed int) {
	log.mu.Lock()
	defer log.mu.Unlock()
	last := from
	for _, e := range log.renews {
		end := e.Start.Add(e.Duration)
		switch {
		case e.Manual || end.Before(from):
		case e.Err != nil:
			failed++
		default:
			gap = max(gap, end.Sub(last))
			last = end
		}
	}
	return gap, failed
}

// TestClusterMasterFailover: a lock held with auto-renewal on a Cluster
// whose name's master fails over to its replica, with a second Locker
// trying the name every 20 ms all through, every grant and Done in a
// history that the checker reads.
//
//   - manual: CLUSTER FAILOVER, as an operator runs it (no write lost). The
//     lock stays held, Done open; its renewals fail for a moment (the
//     old master pauses writes, then answers MOVED) and then follow MOVED
//     to the promoted replica; the second Locker is refused throughout,
//     each time with ErrNotObtained; after, Unlock succeeds and the next
//     token is larger.
//   - paused, killed: the master SIGSTOPped (then resumed: it rejoins as a
//     replica) or SIGKILLed, the lock's key replicated before, and the
//     cluster promotes the replica by itself after cluster-node-timeout
//     (1s). The same, the lease (10s) being longer than the promotion. The
//     Cluster client's slot map is reloaded after a call that got no
//     answer; go-redis alone kept sending the slot's calls to the dead
//     master for a minute, and the lock was lost at Until.
//   - killed, write not replicated: replication cut before the grant, then
//     the master SIGKILLed: the promoted replica never had the key, so the
//     second Locker gets the name while the holder believes it holds it
//     (asynchronous replication: the documented loss); its token is larger,
//     the fence rejects the first holder's write after the second's, and
//     the first holder's Done closes at its next renewal, the key gone.
func TestClusterMasterFailover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		ttl   time.Duration
		fault func(t *testing.T, c *redistest.Cluster, i int)
		cut   bool // replication cut before the grant
	}{
		{"manual", 2 * time.Second, func(t *testing.T, c *redistest.Cluster, i int) { c.Failover(t, i) }, false},
		{"paused", 10 * time.Second, func(t *testing.T, c *redistest.Cluster, i int) {
			c.PauseMaster(t, i)
			c.Resume(t, i)
		}, false},
		{"killed", 10 * time.Second, func(t *testing.T, c *redistest.Cluster, i int) { c.KillMaster(t, i) }, false},
		{"killed, write not replicated", 10 * time.Second, func(t *testing.T, c *redistest.Cluster, i int) { c.KillMaster(t, i) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := redistest.StartCluster(t, 3, redistest.WithClusterReplicas(), redistest.WithClusterNodeTimeout(time.Second))
			log := &eventLog{}
			// Renewals every 100ms, so that some meet the failover.
			holder := newLocker(t, c.Client(t), WithTTL(tc.ttl), WithRenewInterval(100*time.Millisecond), WithObserver(log))
			other := newLocker(t, c.Client(t), WithTTL(tc.ttl))
			s := newScene(t)
			name := "failover-" + strings.NewReplacer(" ", "-", ",", "").Replace(tc.name)
			i := c.Owner(t, int(c.Masters[0].Do(t, "CLUSTER", "KEYSLOT", rlKey(name)).(int64)))
			if tc.cut {
				c.CutReplication(t, i)
			}

			l, err := holder.Lock(ctx, name)
			a := s.took(l, err)
			require.NoError(t, err)
			require.NoError(t, s.write(l))
			if !tc.cut {
				// The grant on the replica before the fault: asynchronous
				// replication would otherwise lose it now and then.
				c.WaitSynced(t, i)
			}
			con := contend(s, other, name)
			start := time.Now()
			tc.fault(t, c, i)
			over := time.Since(start)
			if tc.cut {
				// The name is free on the promoted replica: the contender
				// takes it at its next try.
				if !eventually(5*time.Second, func() bool { return con.granted.Load() > 0 }) {
					con.end()
					t.Fatalf("the second Locker not granted the name on the promoted replica within 5s; key there: %v; errors: %v; last refusal: %v",
						c.Masters[i].Do(t, "PTTL", rlKey(name)), con.odd, con.last.Load())
				}
			} else {
				heldThrough(t, "after the failover", l, other, name, 2*time.Second)
			}
			con.end()
			if !tc.cut {
				// Held by more than its lease: the renewals reach the new
				// master.
				require.True(t, eventually(5*time.Second, func() bool { return renewedAfter(log, start.Add(over)) }),
					"a renewal that started after the failover succeeded")
			}
			gap, failed := renewalGap(log, start)

			assert.Empty(t, con.odd, "the second Locker's errors that are not ErrNotObtained")
			if tc.cut {
				require.NotEmpty(t, con.tokens, "grants of the name to the second Locker after a failover that lost the key")
				assert.Greater(t, con.tokens[0], l.Token(), "the second holder's token")
				assert.ErrorIs(t, s.write(l), ErrStaleToken, "the first holder's write after the second's")
				select {
				case <-l.Done():
				case <-time.After(time.Until(l.Until())):
					t.Fatalf("Done still open at Until, %v after the failover", time.Since(start))
				}
				assert.ErrorIs(t, l.Err(), ErrLost)
				t.Logf("%s: failover over (agreed) %v after the kill; the second Locker granted after %d tries; the first holder's Done closed %v after the kill: %v",
					tc.name, over, con.tries, doneAt(l).Sub(start), l.Err())
				closeAll(t, holder, other)
				s.checkLoss(l, con.first)
				return
			}
			assert.Empty(t, con.tokens, "grants of the held name to the second Locker")
			require.NoError(t, l.Err(), "the holder's Err() after the failover")
			require.NoError(t, s.rec.unlock(ctx, a, l), "Unlock() after the failover")
			next, err := other.TryLock(ctx, name)
			b := s.took(next, err)
			require.NoError(t, err)
			assert.Greater(t, next.Token(), l.Token(), "the next holder's token")
			require.NoError(t, s.write(next))
			require.NoError(t, s.rec.unlock(ctx, b, next))
			t.Logf("%s: failover over (every node agreed) %v after it began; no renewal landed for %v (%d failed), then the new master took them; the second Locker refused %d times",
				tc.name, over, gap, failed, con.tries)
			closeAll(t, holder, other)
			s.check()
		})
	}
}
