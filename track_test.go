package redlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/redistest"
)

// heardWithin is the bound on the 90th percentile of how long after an
// outside change a holder's Done closes (issue "signals": 250 ms).
const heardWithin = 250 * time.Millisecond

// heardAfter waits (bounded) for Done of each lock and returns how long
// after since each closed; a lock whose Done does not close within limit
// counts as limit.
func heardAfter(t *testing.T, since time.Time, limit time.Duration, locks ...*Lock) []time.Duration {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	got := make([]time.Duration, 0, len(locks))
	for _, l := range locks {
		select {
		case <-l.Done():
			got = append(got, time.Since(since))
		case <-deadline.C:
			t.Errorf("Done of %q not closed within %v of the change", l.Name(), limit)
			return append(got, limit)
		}
	}
	return got
}

// holdKind is one kind of hold, and the key an outsider changes to end it.
type holdKind struct {
	name string
	hold func(ctx context.Context, lk *Locker, name string) (*Lock, error)
	key  func(name string) string
	// taken is the reason an outside SET of another value gives.
	taken LossReason
}

var holdKinds = []holdKind{
	{"lock", func(ctx context.Context, lk *Locker, name string) (*Lock, error) { return lk.TryLock(ctx, name) },
		func(name string) string { return "{redlock:" + name + "}" }, LossTaken},
	{"read hold", func(ctx context.Context, lk *Locker, name string) (*Lock, error) { return lk.TryRLock(ctx, name) },
		func(name string) string { return "{redlock:" + name + "}:readers" }, LossTaken},
	{"permit", func(ctx context.Context, lk *Locker, name string) (*Lock, error) {
		s, err := lk.Semaphore(name, 3)
		if err != nil {
			return nil, err
		}
		return s.TryAcquire(ctx)
	}, func(name string) string { return "{redlock:" + name + "}:sem" }, LossTaken},
	{"multi-name", func(ctx context.Context, lk *Locker, name string) (*Lock, error) {
		return lk.TryLockAll(ctx, []string{name + "-a", name})
	}, func(name string) string { return "{redlock:" + name + "}" }, LossTaken},
}

// lossSetup is a loss-tracking test's server, an outside client of it, and
// a Locker whose leases (30 s, renewed every 10 s) are far from any renewal
// while the test runs: only the tracking connections can tell of a change.
func lossSetup(t *testing.T) (*redistest.Server, *redis.Client, *Locker) {
	t.Helper()
	srv := redistest.Start(t)
	return srv, srv.Client(t), newLocker(t, srv.Client(t), WithTTL(30*time.Second))
}

// TestLossHeardAtOnce: an outside DEL, or SET of another value, of a held
// key closes Done at once (p90 of 10 trials within 250 ms), with the reason,
// for every kind of hold; the lease (30 s, renewed every 10 s) is far from
// any renewal, so only the tracking connection can have told.
func TestLossHeardAtOnce(t *testing.T) {
	t.Parallel()
	_, out, lk := lossSetup(t)
	ctx := context.Background()
	changes := []struct {
		name   string
		change func(key string) error
		reason func(k holdKind) LossReason
	}{
		{"DEL", func(key string) error { return out.Del(ctx, key).Err() }, func(holdKind) LossReason { return LossDeleted }},
		{"SET of another value", func(key string) error { return out.Set(ctx, key, "someone-else", time.Minute).Err() },
			func(k holdKind) LossReason { return k.taken }},
	}
	for _, k := range holdKinds {
		for _, ch := range changes {
			t.Run(k.name+"/"+ch.name, func(t *testing.T) {
				var delays []time.Duration
				for i := range 10 {
					name := fmt.Sprintf("heard-%s-%d", strings.ReplaceAll(k.name+ch.name, " ", ""), i)
					l, err := k.hold(ctx, lk, name)
					require.NoError(t, err)
					at := time.Now()
					require.NoError(t, ch.change(k.key(name)))
					delays = append(delays, heardAfter(t, at, 5*time.Second, l)...)
					requireLoss(t, l.Err(), ch.reason(k))
				}
				assert.LessOrEqual(t, quantile(delays, 0.9), heardWithin, "p90 of %v", delays)
			})
		}
	}
}

// TestLossHeardFlushAll: FLUSHALL under 100 holds of every kind closes
// every Done at once, as deleted.
func TestLossHeardFlushAll(t *testing.T) {
	t.Parallel()
	_, out, lk := lossSetup(t)
	ctx := context.Background()
	var locks []*Lock
	for i := range 100 {
		k := holdKinds[i%len(holdKinds)]
		l, err := k.hold(ctx, lk, fmt.Sprintf("flush-%d", i))
		require.NoError(t, err)
		locks = append(locks, l)
	}
	at := time.Now()
	require.NoError(t, out.FlushAll(ctx).Err())
	delays := heardAfter(t, at, 5*time.Second, locks...)
	for _, l := range locks {
		requireLoss(t, l.Err(), LossDeleted)
	}
	assert.LessOrEqual(t, quantile(delays, 0.9), heardWithin, "p90 of %v", delays)
}

// TestLossHeardEviction: a held key evicted by maxmemory closes Done at
// once, as deleted.
func TestLossHeardEviction(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory-policy", "volatile-lru")
	out := srv.Client(t)
	lk := newLocker(t, srv.Client(t), WithTTL(30*time.Second))
	ctx := context.Background()
	var delays []time.Duration
	for i := range 10 {
		l, err := lk.TryLock(ctx, fmt.Sprintf("evicted-%d", i))
		require.NoError(t, err)
		// Only the lock's keys have an expiry, so volatile-lru can evict
		// nothing else; a limit below what the server uses evicts them.
		used := infoField(t, srv, "memory", "used_memory")
		at := time.Now()
		require.NoError(t, out.ConfigSet(ctx, "maxmemory", fmt.Sprint(used/2)).Err())
		delays = append(delays, heardAfter(t, at, 5*time.Second, l)...)
		requireLoss(t, l.Err(), LossDeleted)
		require.NoError(t, out.ConfigSet(ctx, "maxmemory", "0").Err())
		assert.Positive(t, infoField(t, srv, "stats", "evicted_keys"), "evicted keys")
	}
	assert.LessOrEqual(t, quantile(delays, 0.9), heardWithin, "p90 of %v", delays)
}

// TestLossHeardRedlock: on a Redlock, an outside DEL on one master of three
// leaves the lock held; on a second (a majority no longer holds it) Done
// closes at once.
func TestLossHeardRedlock(t *testing.T) {
	t.Parallel()
	srvs := redistest.StartN(t, 3)
	clients := make([]Client, len(srvs))
	for i, s := range srvs {
		clients[i] = s.Client(t)
	}
	rl, err := NewRedlock(clients, WithTTL(30*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { rl.Close() })
	ctx := context.Background()
	var delays []time.Duration
	for i := range 10 {
		name := fmt.Sprintf("heard-redlock-%d", i)
		l, err := rl.TryLock(ctx, name)
		require.NoError(t, err)
		key := "{redlock:" + name + "}"
		for _, s := range srvs {
			// TryLock returns at a quorum; wait for the third grant too.
			require.Eventually(t, func() bool { return s.Client(t).Exists(ctx, key).Val() == 1 }, 5*time.Second, time.Millisecond)
		}
		require.NoError(t, srvs[0].Client(t).Del(ctx, key).Err())
		// A read of every master after the first DEL: the lock must stand.
		_, err = l.TTL(ctx)
		require.NoError(t, err, "TTL after one master of three lost the key")
		require.NoError(t, l.Err(), "after one master of three lost the key")
		at := time.Now()
		require.NoError(t, srvs[1].Client(t).Del(ctx, key).Err())
		delays = append(delays, heardAfter(t, at, 5*time.Second, l)...)
		requireLoss(t, l.Err(), LossDeleted)
	}
	assert.LessOrEqual(t, quantile(delays, 0.9), heardWithin, "p90 of %v", delays)
}

// trackingSubscribers is how many tracking connections listen on srv.
func trackingSubscribers(t testing.TB, srv *redistest.Server) int64 {
	t.Helper()
	r, _ := srv.Do(t, "PUBSUB", "NUMSUB", engine.InvalidateChannel).([]any)
	return r[1].(int64)
}

// TestLossHeardAfterReconnect: a change made while the tracking connection
// was down is found when it comes back, not at the next renewal.
func TestLossHeardAfterReconnect(t *testing.T) {
	t.Parallel()
	srv, out, lk := lossSetup(t)
	ctx := context.Background()
	l, err := lk.TryLock(ctx, "reconnect")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return trackingSubscribers(t, srv) == 1 }, 5*time.Second, time.Millisecond,
		"the tracking connection, once the lock is held for %v", engine.ArmAfter)
	// One step on the server: the tracking connection is killed, then the
	// key deleted, before that connection can be back.
	at := time.Now()
	_, err = out.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ClientKillByFilter(ctx, "TYPE", "pubsub")
		p.Del(ctx, "{redlock:reconnect}")
		return nil
	})
	require.NoError(t, err)
	heardAfter(t, at, 2*time.Second, l)
	requireLoss(t, l.Err(), LossDeleted)
}

// TestTrackingOpensForHeldLocks: the tracking connection opens once a lock
// has been held for ArmAfter, and closes once none has been held for
// DisarmAfter; short critical sections never open it.
func TestTrackingOpensForHeldLocks(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t))
	ctx := context.Background()
	deadline := time.Now().Add(3 * engine.ArmAfter)
	for time.Now().Before(deadline) {
		l, err := lk.TryLock(ctx, "short")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	assert.Zero(t, trackingSubscribers(t, srv), "tracking connections after short holds for %v", 3*engine.ArmAfter)
	l, err := lk.TryLock(ctx, "long")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return trackingSubscribers(t, srv) == 1 }, 5*time.Second, time.Millisecond,
		"the tracking connection of a held lock")
	require.NoError(t, l.Unlock(ctx))
	require.Eventually(t, func() bool { return trackingSubscribers(t, srv) == 0 }, engine.DisarmAfter+5*time.Second, 10*time.Millisecond,
		"the tracking connection, %v after the last hold", engine.DisarmAfter)
}

// trackingArmed reports that every tracking data connection of tr is
// connected and nothing is left to read or arm: the connections' opening
// is over.
func trackingArmed(tr *engine.Tracker) bool {
	tr.Mu.Lock()
	defer tr.Mu.Unlock()
	if !tr.Armed.Load() || len(tr.Suspect) > 0 || len(tr.Arming) > tr.ArmHead {
		return false
	}
	for _, tc := range tr.Conns {
		if dc := tc.Data.Load(); dc == nil || dc.Conns.Load() == 0 {
			return false
		}
	}
	return tr.Reads.Load() > 0
}

// TestOwnWritesStayQuiet: a holder's own acquisitions, renewals, Extends,
// hand-offs and releases, from goroutines contending for a few names, are
// not taken for outside changes: no lock is lost, and no invalidation
// goes uncredited.
func TestOwnWritesStayQuiet(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// Renewals every 20 ms, and a node timeout of 1 s: at the default for a
	// 300 ms lease (100 ms) a loaded machine timed out Extends, which are
	// not what this test is about.
	lk := newLocker(t, srv.Client(t), WithTTL(3*time.Second), WithRenewInterval(20*time.Millisecond), WithNodeTimeout(time.Second))
	tr := lk.c.Track
	ctx := context.Background()
	// A long hold keeps the tracking connections open; when they open, it
	// is read once (changes before were not heard).
	keep, err := lk.TryLock(ctx, "quiet-keep")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return trackingArmed(tr) }, 5*time.Second, time.Millisecond,
		"the read of the held lock when the tracking connections open")
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 20 {
				l, err := lk.Lock(ctx, fmt.Sprintf("quiet-%d", i%3))
				if !assert.NoError(t, err) {
					return
				}
				assert.NoError(t, l.Extend(ctx, 3*time.Second))
				// Held across renewals of its own, and past ArmAfter now
				// and then.
				<-time.After(30 * time.Millisecond)
				assert.NoError(t, l.Unlock(ctx), "goroutine %d round %d", g, i)
			}
		})
	}
	wg.Wait()
	require.NoError(t, keep.Err(), "the long hold, through the others' own writes")
	require.NoError(t, keep.Unlock(ctx))
	// About 400 own writes (80 sections: acquire or hand-off, Extend,
	// renewals every 20 ms, release), some of armed keys; uncredited, each
	// would count. A load that delays a reply past its credit can leave
	// one or two. One that times out a call on the data connection (node
	// timeout 1 s here) has it replaced, and a renewal the old one still
	// sends is heard by the new one: read, but counted apart.
	assert.LessOrEqual(t, tr.Outside.Load(), int64(2), "invalidations taken for outside changes (of %d heard; %d more just after a data connection connected)",
		tr.Heard.Load(), tr.AfterConnect.Load())
}

// TestTrackingAddsNoCommand: an uncontended TryLock+Unlock sends exactly
// its two scripts (INFO commandstats): no lease read, no tracking command,
// also while another lock of the Locker is held long enough for the
// tracking connection to be open. That lock is not renewed: its renewal,
// due every TTL/3 (3.3 s by default), would add an EVALSHA of its own to a
// window of 200 pairs that a loaded machine stretches past that.
func TestTrackingAddsNoCommand(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t))
	ctx := context.Background()
	long, err := lk.TryLock(ctx, "long", WithAutoRenew(false), WithTTL(time.Hour))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return trackingSubscribers(t, srv) == 1 && trackingArmed(lk.c.Track) }, 5*time.Second, time.Millisecond)
	srv.Do(t, "CONFIG", "RESETSTAT")
	const pairs = 200
	for range pairs {
		l, err := lk.TryLock(ctx, "alone")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	// The scripts' own commands count too; the client sends only these.
	calls := allCalls(t, srv)
	for _, cmd := range []string{"evalsha", "eval", "subscribe", "client|tracking", "client|id"} {
		want := 0
		if cmd == "evalsha" {
			want = 2 * pairs
		}
		assert.Equal(t, want, calls[cmd], "%s calls for %d uncontended pairs", cmd, pairs)
	}
	require.NoError(t, long.Unlock(ctx))
}

// allCalls reads how often the server ran each command (INFO commandstats).
func allCalls(t testing.TB, srv *redistest.Server) map[string]int {
	t.Helper()
	calls := map[string]int{}
	for _, line := range strings.Split(srv.Info(t, "commandstats"), "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		require.NoError(t, err, line)
		calls[name] = n
	}
	return calls
}

// infoField reads one numeric field of an INFO section.
func infoField(t testing.TB, srv *redistest.Server, section, field string) int64 {
	t.Helper()
	for _, line := range strings.Split(srv.Info(t, section), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err, line)
			return n
		}
	}
	t.Fatalf("no %s in INFO %s", field, section)
	return 0
}

// TestLossHeardAfterFailover: after a Sentinel failover the tracking
// connection follows the new master (the old one keeps running, as after
// SENTINEL FAILOVER until the sentinels reconfigure it), so a lock whose
// key is deleted on the new master is lost within a second.
func TestLossHeardAfterFailover(t *testing.T) {
	t.Parallel()
	g := redistest.StartSentinel(t)
	lk := newLocker(t, g.FailoverClient(t, nil), WithTTL(30*time.Second))
	ctx := context.Background()
	l, err := lk.TryLock(ctx, "failover")
	require.NoError(t, err)
	old := g.Master(t)
	require.Eventually(t, func() bool { return trackingSubscribers(t, old) == 1 }, 5*time.Second, time.Millisecond)
	g.Failover(t)
	now := g.Master(t)
	require.NotEqual(t, old.Addr(), now.Addr())
	require.Eventually(t, func() bool { return trackingSubscribers(t, now) == 1 }, time.Second, time.Millisecond,
		"the tracking connection on the new master")
	at := time.Now()
	now.Do(t, "DEL", "{redlock:failover}")
	heardAfter(t, at, time.Second, l)
	requireLoss(t, l.Err(), LossDeleted)
}

// TestTrackingHearsOwnNamesOnly: the server tells an instance of changes to
// the names it holds only (issue "scale"): while a second fleet of Lockers
// renews other names on the same server, one of whose names the instance
// waits for, and the instance renews its own, it hears nothing; an outside
// DEL of one of its keys and its own Extend through the pool are all it
// hears, and only the DEL is taken for an outside change.
func TestTrackingHearsOwnNamesOnly(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	const ttl = 600 * time.Millisecond
	a := newLocker(t, srv.Client(t), WithTTL(ttl))
	var mine []*Lock
	for i := range 50 {
		l, err := a.TryLock(ctx, fmt.Sprintf("mine-%d", i))
		require.NoError(t, err)
		mine = append(mine, l)
	}
	acquired := time.Now()
	for f := range 4 {
		b := newLocker(t, srv.Client(t), WithTTL(ttl))
		for i := range 50 {
			_, err := b.TryLock(ctx, fmt.Sprintf("theirs-%d-%d", f, i))
			require.NoError(t, err)
		}
	}
	tr := a.c.Track
	require.Eventually(t, func() bool { return trackingArmed(tr) }, 5*time.Second, time.Millisecond)
	waitCtx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := a.Lock(waitCtx, "theirs-0-0")
		waited <- err
	}()
	heard, outside := tr.Heard.Load(), tr.Outside.Load()+tr.AfterConnect.Load()
	calls := allCalls(t, srv)["evalsha"]
	time.Sleep(5 * ttl / 2) // each lock renewed about 7 times (every TTL/3)
	stopWaiting()
	require.Error(t, <-waited, "the wait for a name the other fleet holds")
	assert.Greater(t, allCalls(t, srv)["evalsha"]-calls, 1000, "renewals of both fleets during the window")
	assert.Zero(t, tr.Heard.Load()-heard, "invalidations heard while both fleets renewed")
	// An own write's unspent credit covers an invalidation of its key for
	// 2 s (creditFor) after the write. On a loaded machine the tracking
	// connections can open while the acquisitions above are still under
	// way, and mine-7's credit would then cover the DEL: it comes after.
	time.Sleep(time.Until(acquired.Add(2*time.Second + 100*time.Millisecond)))
	require.NoError(t, srv.Client(t).Del(ctx, "{redlock:mine-7}").Err())
	heardAfter(t, time.Now(), 5*time.Second, mine[7])
	requireLoss(t, mine[7].Err(), LossDeleted)
	require.NoError(t, mine[3].Extend(ctx, ttl))
	require.Eventually(t, func() bool { return tr.Heard.Load()-heard == 2 }, 5*time.Second, time.Millisecond,
		"the DEL's invalidation and the Extend's")
	time.Sleep(ttl)
	assert.Equal(t, int64(2), tr.Heard.Load()-heard, "invalidations heard: the DEL's and the Extend's")
	assert.Equal(t, int64(1), tr.Outside.Load()+tr.AfterConnect.Load()-outside, "taken for outside changes: the DEL")
	for i, l := range mine {
		if i != 7 {
			require.NoError(t, l.Err(), "lock %d", i)
		}
	}
}

// TestTrackingUnspentCreditLapsesWhileRenewed: an own write's credit whose
// invalidation never comes (the acquisition of a key that nobody tracked
// yet: a lock taken once the tracking connections are open, before its
// arming read) lapses creditFor (2 s) after that write, also while the
// watchdog renews the lock on the data connection, and an outside DEL
// after that is taken for an outside change. The renewals need no credit;
// when they announced themselves all the same, each restarted the unspent
// credit's lapse, and it absorbed the DEL (the lock was still found lost,
// by the read that follows an own write's invalidation).
func TestTrackingUnspentCreditLapsesWhileRenewed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const ttl = 300 * time.Millisecond // renewed every 100 ms
	lk := newLocker(t, srv.Client(t), WithTTL(ttl))
	ctx := context.Background()
	_, err := lk.TryLock(ctx, "opens-tracking")
	require.NoError(t, err)
	tr := lk.c.Track
	require.Eventually(t, func() bool { return trackingArmed(tr) }, 5*time.Second, time.Millisecond)
	l, err := lk.TryLock(ctx, "later")
	require.NoError(t, err)
	time.Sleep(3 * time.Second) // the credit's life and more, renewals all along: the period under test
	require.Eventually(t, func() bool { return trackingArmed(tr) }, 5*time.Second, time.Millisecond, "later's arming read")
	require.NoError(t, l.Err())
	outside := tr.Outside.Load() + tr.AfterConnect.Load()
	require.NoError(t, srv.Client(t).Del(ctx, "{redlock:later}").Err())
	heardAfter(t, time.Now(), 5*time.Second, l)
	requireLoss(t, l.Err(), LossDeleted)
	assert.Equal(t, int64(1), tr.Outside.Load()+tr.AfterConnect.Load()-outside, "the DEL taken for an outside change")
}

// TestRearmAfterReconnectBounded: after the tracking connections come back,
// every held lock is read once, through one data connection per node, in
// pipelines of VerifyBatch locks; a key deleted while they were down is
// found.
func TestRearmAfterReconnectBounded(t *testing.T) {
	t.Parallel()
	_, out, lk := lossSetup(t)
	ctx := context.Background()
	const held = 2000
	locks := make([]*Lock, held)
	for i := range locks {
		var err error
		locks[i], err = lk.TryLock(ctx, fmt.Sprintf("rearm-%d", i))
		require.NoError(t, err)
	}
	tr := lk.c.Track
	require.Eventually(t, func() bool { return trackingArmed(tr) }, 5*time.Second, time.Millisecond)
	reads := tr.Reads.Load()
	at := time.Now()
	_, err := out.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ClientKillByFilter(ctx, "TYPE", "pubsub")
		p.Del(ctx, "{redlock:rearm-1234}")
		return nil
	})
	require.NoError(t, err)
	heard := heardAfter(t, at, 2*time.Second, locks[1234])
	requireLoss(t, locks[1234].Err(), LossDeleted)
	require.Eventually(t, func() bool { return trackingArmed(tr) && tr.Reads.Load()-reads >= held }, 5*time.Second, time.Millisecond)
	t.Logf("the deleted key heard %v after the kill; %d locks armed again %v after it", heard, held, time.Since(at))
	// Once each; a batch whose pipeline outlived the node timeout on a
	// loaded machine is read again (through the pool, then on the data
	// connection), which a slow run may see once or twice.
	assert.LessOrEqual(t, tr.Reads.Load()-reads, int64(held+4*engine.VerifyBatch), "locks read after the reconnection")
	var data []string
	// The old one may linger a moment in CLIENT LIST after its close.
	assert.Eventually(t, func() bool { data = dataConnLines(ctx, out); return len(data) == 1 }, 2*time.Second, 10*time.Millisecond,
		"data connections: the re-arm's reads in flight are one pipeline")
	if len(data) != 1 {
		t.Logf("data connections after 2s:\n%s", strings.Join(data, ""))
	}
	for i, l := range locks {
		if i != 1234 {
			require.NoError(t, l.Err(), "lock %d", i)
		}
	}
}

// TestLossHeardAfterDataConnKilled: the data connection killed while idle
// (CLIENT KILL TYPE normal, as an operator might), with a held key deleted
// in the same step: the keeper's ping of an idle data connection finds it
// gone within IdlePing, a new one arms every held lock again, and the
// deletion is found then; the other locks, renewed across the kill, stay
// held.
func TestLossHeardAfterDataConnKilled(t *testing.T) {
	t.Parallel()
	srv, out, lk := lossSetup(t)
	short := newLocker(t, srv.Client(t), WithTTL(600*time.Millisecond))
	ctx := context.Background()
	l, err := lk.TryLock(ctx, "killed-data")
	require.NoError(t, err)
	var renewed []*Lock
	for i := range 10 {
		r, err := short.TryLock(ctx, fmt.Sprintf("killed-data-renewed-%d", i))
		require.NoError(t, err)
		renewed = append(renewed, r)
	}
	require.Eventually(t, func() bool { return trackingArmed(lk.c.Track) && trackingArmed(short.c.Track) }, 5*time.Second, time.Millisecond)
	// The idle data connection has been pinged once: its last command on
	// the server is the keeper's PING.
	require.Eventually(t, func() bool { return pingedDataConn(ctx, out) }, engine.IdlePing+5*time.Second, 10*time.Millisecond,
		"no PING on the idle data connection")
	at := time.Now()
	_, err = out.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ClientKillByFilter(ctx, "TYPE", "normal")
		p.Del(ctx, "{redlock:killed-data}")
		return nil
	})
	require.NoError(t, err)
	delay := heardAfter(t, at, 5*time.Second, l)
	requireLoss(t, l.Err(), LossDeleted)
	assert.Less(t, delay[0], engine.IdlePing+4*engine.FollowEvery, "heard after the data connection was killed")
	// Each short lock renewed after the kill: its Until is past a TTL from it.
	require.Eventually(t, func() bool {
		for _, r := range renewed {
			if !r.Until().After(at.Add(600 * time.Millisecond)) {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "the short locks were not renewed after the kill")
	for i, r := range renewed {
		require.NoError(t, r.Err(), "lock %d, renewed across the kill", i)
	}
}

// TestDataConnectionIsOne: a node's data connection is one connection: the
// keeper's PING of an idle one goes over the socket whose reads armed the
// held locks. go-redis v9.23 gives pipelines (the reads, the renewals) a
// pool of their own unless told otherwise, and the PING went to the other
// one: that socket killed alone (CLIENT KILL ID) tracked nothing more, the
// PING still passed, and a held key deleted then went unheard until the
// lock's next renewal. Here the kill of the one connection is found by the
// PING and the deletion heard within IdlePing.
func TestDataConnectionIsOne(t *testing.T) {
	t.Parallel()
	_, out, lk := lossSetup(t)
	ctx := context.Background()
	locks := make([]*Lock, 20)
	for i := range locks {
		var err error
		locks[i], err = lk.TryLock(ctx, fmt.Sprintf("one-conn-%d", i))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return trackingArmed(lk.c.Track) }, 5*time.Second, time.Millisecond)
	// Idle now: wait for the keeper's PING.
	require.Eventually(t, func() bool { return pingedDataConn(ctx, out) }, engine.IdlePing+5*time.Second, 10*time.Millisecond,
		"no PING on the idle data connection")
	lines := dataConnLines(ctx, out)
	require.Len(t, lines, 1, "data connections:\n%s", strings.Join(lines, ""))
	id := strings.TrimPrefix(strings.Fields(lines[0])[0], "id=")
	at := time.Now()
	_, err := out.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ClientKillByFilter(ctx, "ID", id)
		p.Del(ctx, "{redlock:one-conn-7}")
		return nil
	})
	require.NoError(t, err)
	delay := heardAfter(t, at, 5*time.Second, locks[7])
	requireLoss(t, locks[7].Err(), LossDeleted)
	assert.Less(t, delay[0], engine.IdlePing+4*engine.FollowEvery, "heard after the data connection was killed")
	for i, l := range locks {
		if i != 7 {
			require.NoError(t, l.Err(), "lock %d", i)
		}
	}
}

// dataConnLines returns the CLIENT LIST lines of the tracking data
// connections on out's server.
func dataConnLines(ctx context.Context, out *redis.Client) []string {
	var lines []string
	for line := range strings.Lines(out.ClientList(ctx).Val()) {
		if strings.Contains(line, " name=redlock-tracking-data ") {
			lines = append(lines, line)
		}
	}
	return lines
}

// pingedDataConn reports that a tracking data connection on out's server
// last ran PING: the keeper's, on an idle one.
func pingedDataConn(ctx context.Context, out *redis.Client) bool {
	return slices.ContainsFunc(dataConnLines(ctx, out), func(l string) bool { return strings.Contains(l, " cmd=ping ") })
}

// TestLossHeardAfterRenewals: a hold renewed on the tracking data
// connection stays armed, for every kind (the extend scripts read their
// keys after moving them; zextend.lua when told, kindOps.rearmArg). Each
// DEL comes right after a renewal was seen, a second before the next, so
// only the tracking connection can have told within 250 ms.
func TestLossHeardAfterRenewals(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	out := srv.Client(t)
	lk := newLocker(t, srv.Client(t), WithTTL(3*time.Second))
	ctx := context.Background()
	for _, k := range holdKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			var locks []*Lock
			var names []string
			for i := range 5 {
				name := fmt.Sprintf("renewed-%s-%d", strings.ReplaceAll(k.name, " ", ""), i)
				l, err := k.hold(ctx, lk, name)
				require.NoError(t, err)
				locks, names = append(locks, l), append(names, name)
			}
			for _, l := range locks {
				first := l.Until()
				require.True(t, eventually(5*time.Second, func() bool { return l.Until().After(first) }), "no renewal of %s", l.Name())
			}
			at := time.Now()
			for _, name := range names {
				require.NoError(t, out.Del(ctx, k.key(name)).Err())
			}
			delays := heardAfter(t, at, 5*time.Second, locks...)
			for _, l := range locks {
				requireLoss(t, l.Err(), LossDeleted)
			}
			assert.LessOrEqual(t, quantile(delays, 0.9), heardWithin, "p90 of %v", delays)
		})
	}
}

// TestTrackerForgetsReleasedLocks: the tracker's book keeps nothing of a
// released lock for longer than its credits may absorb the release's
// invalidation, for every kind of hold, on one name used again and again
// and on names used once, with the tracking connections closed and while
// a long hold keeps them open; on a Locker and on a Redlock. A released
// lock used to stay in the book until an invalidation of its key came,
// which for a key nobody read is never: every lock ever released stayed
// reachable.
func TestTrackerForgetsReleasedLocks(t *testing.T) {
	t.Parallel()
	// creditFor (2 s) after the last write, and the keeper's next round
	// (FollowEvery) or its closing of the connections (DisarmAfter).
	const drained = 10 * time.Second
	run := func(t *testing.T, lk *Locker, tr *engine.Tracker, armed bool) {
		ctx := context.Background()
		held := 0
		if armed {
			keep, err := lk.TryLock(ctx, "forget-keep")
			require.NoError(t, err)
			t.Cleanup(func() { keep.Unlock(ctx) })
			require.Eventually(t, func() bool { return trackingArmed(tr) }, 5*time.Second, time.Millisecond,
				"the tracking connections open for the long hold")
			held = 1
		}
		for _, k := range holdKinds {
			for i := range 150 {
				name := "forget-hot-" + k.name
				if i%2 == 1 {
					name = fmt.Sprintf("forget-%s-%d", k.name, i)
				}
				l, err := k.hold(ctx, lk, name)
				require.NoError(t, err, "%s %s", k.name, name)
				require.NoError(t, l.Unlock(ctx), "%s %s", k.name, name)
			}
		}
		l, err := lk.Lock(ctx, "forget-waited")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
		locks, ghosts := tr.Book()
		t.Logf("after 601 holds released: %d locks watched, credits left on %d keys", locks, ghosts)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			locks, ghosts := tr.Book()
			assert.Equal(c, held, locks, "locks watched (the held ones)")
			assert.Zero(c, ghosts, "keys with credits of released locks")
		}, drained, 10*time.Millisecond, "the book, %v after the last release", drained)
	}
	for _, armed := range []bool{false, true} {
		t.Run(fmt.Sprintf("locker/armed=%v", armed), func(t *testing.T) {
			t.Parallel()
			lk := newLocker(t, redistest.Start(t).Client(t))
			run(t, lk, lk.c.Track, armed)
		})
	}
	t.Run("redlock", func(t *testing.T) {
		t.Parallel()
		r := newRL(t, startRLNodes(t, 3, false, time.Second))
		ctx := context.Background()
		keep, err := r.TryLock(ctx, "forget-keep")
		require.NoError(t, err)
		defer keep.Unlock(ctx)
		require.Eventually(t, func() bool { return trackingArmed(r.c.Track) }, 5*time.Second, time.Millisecond,
			"the tracking connections open for the long hold")
		for i := range 200 {
			l, err := r.TryLock(ctx, fmt.Sprintf("forget-%d", i%3))
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))
		}
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			locks, ghosts := r.c.Track.Book()
			assert.Equal(c, 1, locks, "locks watched (the held one)")
			assert.Zero(c, ghosts, "keys with credits of released locks")
		}, drained, 10*time.Millisecond, "the book, %v after the last release", drained)
	})
}

// TestLossHeardWhileArming: a lock that becomes held while the tracking
// connections are being opened, after their subscriptions read the locks
// held then, is armed all the same, so an outside DEL of it is heard at
// once. (The connections open once a lock is held ArmAfter; the first lock
// here is deleted at once, so that the subscriptions' read finds it lost,
// which tells the test that the read has run.)
func TestLossHeardWhileArming(t *testing.T) {
	t.Parallel()
	_, out, lk := lossSetup(t)
	ctx := context.Background()
	// Set before the first lock, whose hold wakes the keeper that reads it.
	firstCh, second := make(chan *Lock, 1), make(chan *Lock, 1)
	var once sync.Once
	lk.c.Track.AfterArm = func() {
		once.Do(func() {
			// The keeper's goroutine, inside arm: wait for the
			// subscriptions' read, then take the second lock.
			select {
			case first := <-firstCh:
				select {
				case <-first.Done():
				case <-time.After(5 * time.Second):
				}
			case <-time.After(5 * time.Second):
			}
			l, err := lk.TryLock(ctx, "arming-2")
			assert.NoError(t, err)
			second <- l
		})
	}
	first, err := lk.TryLock(ctx, "arming-1")
	require.NoError(t, err)
	firstCh <- first
	require.NoError(t, out.Del(ctx, "{redlock:arming-1}").Err())
	heardAfter(t, time.Now(), 10*time.Second, first)
	requireLoss(t, first.Err(), LossDeleted)
	var l *Lock
	select {
	case l = <-second:
		require.NotNil(t, l)
	case <-time.After(10 * time.Second):
		t.Fatal("the keeper did not arm")
	}
	at := time.Now()
	require.NoError(t, out.Del(ctx, "{redlock:arming-2}").Err())
	heardAfter(t, at, 5*time.Second, l)
	requireLoss(t, l.Err(), LossDeleted)
}

// TestLossTrackingPerCallHasNoEffect: WithLossTracking given per call
// changes nothing (the tracking connections are the constructor's): an
// outside DEL of a lock taken with WithLossTracking(false) on a tracking
// Locker is heard at once all the same, with its renewal 10 s away.
func TestLossTrackingPerCallHasNoEffect(t *testing.T) {
	t.Parallel()
	_, out, lk := lossSetup(t)
	ctx := context.Background()
	l, err := lk.TryLock(ctx, "per-call-untracked", WithLossTracking(false))
	require.NoError(t, err)
	at := time.Now()
	require.NoError(t, out.Del(ctx, rlKey("per-call-untracked")).Err())
	heardAfter(t, at, 5*time.Second, l)
	requireLoss(t, l.Err(), LossDeleted)
}
