package redlock

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/internal/scripts"
)

// TestRedlockHungMasterDoesNotStallRounds: with one master of three paused,
// an attempt that the other two leave undecided (one grants, one refuses)
// waits for the paused master once, for the node timeout; after that the
// rounds end as soon as the two have answered, withdrawing the grant, and
// the first answer of the master after it resumes makes rounds wait for it
// again.
func TestRedlockHungMasterDoesNotStallRounds(t *testing.T) {
	t.Parallel()
	const nodeTimeout = 2 * time.Second
	nodes := startRLNodes(t, 3, false, 5*time.Second)
	r := newRL(t, nodes, WithNodeTimeout(nodeTimeout), WithAutoRenew(false))
	warmUp(t, r)
	ctx := context.Background()
	// Another owner holds the name on master 1: master 2 grants, master 1
	// refuses, master 0 decides.
	require.NoError(t, nodes[1].admin.Set(ctx, rlKey("split"), "another", time.Minute).Err())
	nodes[0].srv.Pause(t)
	defer nodes[0].srv.Resume(t)

	start := time.Now()
	_, err := r.TryLock(ctx, "split")
	first := time.Since(start)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.GreaterOrEqual(t, first, nodeTimeout, "the first round after the pause waits for master 0's node timeout")
	for i := range 5 {
		start := time.Now()
		_, err := r.TryLock(ctx, "split")
		took := time.Since(start)
		require.ErrorIs(t, err, ErrNotObtained)
		var ne *NodeError
		require.ErrorAs(t, err, &ne, "the paused master is named")
		assert.Less(t, took, nodeTimeout/2, "round %d waited for the paused master again", i)
		assert.Empty(t, holding(t, nodes, "split", 2), "round %d: the grant on master 2 is withdrawn", i)
	}

	nodes[0].srv.Resume(t)
	require.NoError(t, nodes[1].admin.Del(ctx, rlKey("split")).Err())
	// The resumed master answers the calls still queued to it; after its
	// first answer, rounds wait for it again, so a lock lands on all three.
	require.True(t, eventually(5*time.Second, func() bool {
		l, err := r.TryLock(ctx, "after")
		if err != nil {
			return false
		}
		on := len(holding(t, nodes, "after", 0, 1, 2))
		require.NoError(t, l.Unlock(ctx))
		return on == 3
	}), "after the resume, a lock is placed on every master again")
}

// TestRedlockFailedAttemptsWakeNobody: a holder with two masters of three
// (the third free) keeps the name; waiters whose attempts take the free
// master, fail, and withdraw that grant do not wake each other into a loop
// of attempts for as long as the holder holds: each waits for the
// holder's release.
func TestRedlockFailedAttemptsWakeNobody(t *testing.T) {
	t.Parallel()
	nodes := startRLNodes(t, 3, false, time.Second)
	ctx := context.Background()
	holder := newRL(t, nodes, WithTTL(10*time.Second))
	// Master 0 is taken by another owner while the holder acquires: the
	// holder gets masters 1 and 2, then master 0 is free.
	require.NoError(t, nodes[0].admin.Set(ctx, rlKey("herd"), "another", time.Minute).Err())
	l, err := holder.TryLock(ctx, "herd")
	require.NoError(t, err)
	require.NoError(t, nodes[0].admin.Del(ctx, rlKey("herd")).Err())

	const waiters = 3
	base := commandCalls(t, nodes[1].srv, "evalsha")
	var wg sync.WaitGroup
	got := make(chan *Lock, waiters)
	for range waiters {
		w := newRL(t, nodes, WithTTL(10*time.Second))
		wg.Go(func() {
			wl, err := w.Lock(ctx, "herd")
			if assert.NoError(t, err) {
				got <- wl
			}
		})
	}
	// Every waiter has made its first attempt (master 1 saw it) and waits.
	require.True(t, eventually(5*time.Second, func() bool { return commandCalls(t, nodes[1].srv, "evalsha") >= base+waiters }))
	before := commandCalls(t, nodes[1].srv, "evalsha")
	hold := time.Second
	time.Sleep(hold) // the holder holds: this is the interval under test, not a synchronisation
	during := commandCalls(t, nodes[1].srv, "evalsha") - before
	require.NoError(t, l.Unlock(ctx))
	for range waiters {
		wl := <-got
		require.NoError(t, wl.Unlock(ctx))
	}
	wg.Wait()
	t.Logf("%d waiters: %d attempts while the holder held for %v", waiters, during, hold)
	// Each failed attempt withdraws its grant on master 0 and publishes.
	// When the withdrawal passed the name to the next queued waiter, which
	// retried at once, 3 waiters made about 2,500 attempts in this second.
	assert.LessOrEqual(t, during, 10*waiters, "attempts while the holder held (hundreds a second per waiter when each withdrawal woke the others)")
}

// TestRedlockLeaderSurvivesEmptyRestarts: three candidates, each its own
// Redlock over three masters (TTL 2s, go-redis default clients). While the
// first leader leads, master 0 and then master 1 are killed and restarted
// empty; under the second leader, master 2. A leader's key must be on two
// masters of three after every single restart, so it stays the leader for
// two leases after each, and no other candidate is elected until it
// resigns. Before lease repair, the first leader's key was on masters 1
// and 2 only after the first restart, and the second restart left it on
// one: lost ("quorum of nodes lost"), and the next candidate elected.
// Contenders woken by one resignation also split the masters (one gets
// two, the other one, then withdraws it), which left the winner on a bare
// quorum for its whole life in the same way.
func TestRedlockLeaderSurvivesEmptyRestarts(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	nodes := startRLNodes(t, 3, false, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	type won struct {
		who int
		l   *Lock
	}
	elected := make(chan won, 3)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range 3 {
		clients := make([]Client, len(nodes))
		for j, nd := range nodes {
			cl := redis.NewClient(&redis.Options{Addr: nd.srv.Addr()})
			t.Cleanup(func() { _ = cl.Close() })
			clients[j] = cl
		}
		r, err := NewRedlock(clients, WithTTL(ttl))
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Close() })
		e := r.Election("restarts")
		if i > 0 {
			// The others campaign once the first leads.
			require.True(t, eventually(5*time.Second, func() bool {
				_, err := e.Leader(ctx)
				return err == nil
			}))
		}
		wg.Go(func() {
			l, err := e.Campaign(ctx, strconv.Itoa(i))
			if err == nil {
				elected <- won{i, l}
			}
		})
	}
	next := func(why string) won {
		t.Helper()
		select {
		case w := <-elected:
			return w
		case <-time.After(10 * time.Second):
			t.Fatalf("no leader elected %s", why)
		}
		return won{}
	}
	// restart restarts master m empty under lead, once lead's key is on
	// every master (bounded: without repair it may never be), and checks
	// for two leases that lead stays the leader with its key on two
	// masters at least.
	restart := func(lead won, m int) {
		t.Helper()
		all := eventually(3*ttl, func() bool { return ownedBy(t, nodes, "restarts", lead.l.Owner(), 0, 1, 2) == 3 })
		t.Logf("leader %d's key on every master before master %d restarts: %v", lead.who, m, all)
		nodes[m].srv.Restart(t)
		end := time.Now().Add(2 * ttl)
		for time.Now().Before(end) {
			select {
			case <-lead.l.Done():
				t.Fatalf("leader %d lost after master %d restarted empty: %v", lead.who, m, lead.l.Err())
			case w := <-elected:
				t.Fatalf("candidate %d elected while leader %d leads (master %d restarted)", w.who, lead.who, m)
			case <-time.After(50 * time.Millisecond):
			}
			require.GreaterOrEqual(t, ownedBy(t, nodes, "restarts", lead.l.Owner(), 0, 1, 2), 2,
				"leader %d's key on two masters at least after master %d restarted", lead.who, m)
		}
	}

	lead := next("at first")
	restart(lead, 0)
	restart(lead, 1)
	require.NoError(t, lead.l.Unlock(ctx), "leader %d resigns", lead.who)
	lead = next("after the first resignation")
	restart(lead, 2)
	require.NoError(t, lead.l.Unlock(ctx), "leader %d resigns", lead.who)
	lead = next("after the second resignation")
	require.NoError(t, lead.l.Unlock(ctx))
}

// TestRedlockLeaseRepair: a renewal that a quorum of masters extended puts
// the lock back on a master where its key is gone, if the name is free
// there, with the fence counter raised to the lock's token; never over
// another owner's key, and never for a lock that is lost.
func TestRedlockLeaseRepair(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ttl = time.Second
	fence := rlKey("repair") + ":fence"

	t.Run("bare quorum", func(t *testing.T) {
		t.Parallel()
		nodes := startRLNodes(t, 3, false, time.Second)
		a := newRL(t, nodes, WithTTL(ttl), WithMetadata("a"))
		b := newRL(t, nodes, WithTTL(ttl))
		// A contender's grant on master 2 for a moment: A gets 0 and 1.
		require.NoError(t, nodes[2].admin.Set(ctx, rlKey("repair"), "contender", 200*time.Millisecond).Err())
		l, err := a.TryLock(ctx, "repair")
		require.NoError(t, err)
		require.Equal(t, 2, ownedBy(t, nodes, "repair", l.Owner(), 0, 1, 2))
		start := time.Now()
		require.True(t, eventually(3*ttl, func() bool { return ownedBy(t, nodes, "repair", l.Owner(), 0, 1, 2) == 3 }),
			"A's key put back on master 2 once the name is free there")
		t.Logf("on every master %v after the grant", time.Since(start).Round(time.Millisecond))
		counter, err := nodes[2].admin.Get(ctx, fence).Int64()
		require.NoError(t, err)
		assert.GreaterOrEqual(t, counter, l.Token(), "master 2's fence counter raised to A's token")
		pttl, err := nodes[2].admin.PTTL(ctx, rlKey("repair")).Result()
		require.NoError(t, err)
		assert.LessOrEqual(t, pttl, ttl, "the repaired key lives no longer than the lease")
		assert.Contains(t, get(t, nodes[2].admin, rlKey("repair")+":meta"), "\na", "the metadata put back with it")

		// One master restarted empty: A's key is still on two of three.
		nodes[0].srv.Restart(t)
		_, err = b.TryLock(ctx, "repair")
		require.ErrorIs(t, err, ErrNotObtained, "B after one restart")
		require.True(t, eventually(3*ttl, func() bool { return ownedBy(t, nodes, "repair", l.Owner(), 0, 1, 2) == 3 }),
			"A's key put back on the restarted master")
		nodes[1].srv.Restart(t)
		_, err = b.TryLock(ctx, "repair")
		require.ErrorIs(t, err, ErrNotObtained, "B after a second restart, of another master")
		require.NoError(t, l.Err())
		require.NoError(t, l.Unlock(ctx))
		// Unlock returns once a quorum released; a repair still on its way
		// to the restarted master deletes what it set when it answers.
		assert.True(t, eventually(time.Second, func() bool { return len(holding(t, nodes, "repair", 0, 1, 2)) == 0 }),
			"released everywhere, the repaired keys too: still on %v", holding(t, nodes, "repair", 0, 1, 2))
	})

	t.Run("another owner", func(t *testing.T) {
		t.Parallel()
		nodes := startRLNodes(t, 3, false, time.Second)
		a := newRL(t, nodes, WithTTL(ttl))
		require.NoError(t, nodes[2].admin.Set(ctx, rlKey("repair"), "another", time.Minute).Err())
		l, err := a.TryLock(ctx, "repair")
		require.NoError(t, err)
		base := commandCalls(t, nodes[0].srv, "evalsha")
		// Three renewals at least (TTL/3 each) on master 0.
		require.True(t, eventually(5*ttl, func() bool { return commandCalls(t, nodes[0].srv, "evalsha") >= base+3 }))
		assert.Equal(t, "another", get(t, nodes[2].admin, rlKey("repair")), "another owner's key untouched")
		pttl, err := nodes[2].admin.PTTL(ctx, rlKey("repair")).Result()
		require.NoError(t, err)
		assert.Greater(t, pttl, 50*time.Second, "its expiry untouched")
		require.NoError(t, l.Err())
		require.NoError(t, l.Unlock(ctx))
	})

	t.Run("lost", func(t *testing.T) {
		t.Parallel()
		nodes := startRLNodes(t, 3, false, time.Second)
		renewals := countScript(scripts.Extend)
		for _, nd := range nodes {
			nd.client.AddHook(renewals)
		}
		a := newRL(t, nodes, WithTTL(ttl), WithLossTracking(false))
		l, err := a.TryLock(ctx, "repair")
		require.NoError(t, err)
		// Both keys go at once (two goroutines), right after a renewal
		// round was answered by every master, the next one a renew
		// interval away: a renewal whose calls land on either side of the
		// deletions (extended on one master before, refused on the other
		// after) still saw a quorum and rightly put the keys back. A
		// starved machine can still interleave one; then the deletion is
		// repeated (bounded), after the next round again.
		lost := false
		for try := 0; try < 3 && !lost; try++ {
			base := renewals.answered.Load()
			require.True(t, eventually(2*ttl, func() bool {
				n, answered := renewals.n.Load(), renewals.answered.Load()
				return answered >= base+3 && answered == n
			}), "a renewal round answered by the three masters")
			var wg sync.WaitGroup
			for _, i := range []int{0, 1} {
				wg.Go(func() { _ = nodes[i].admin.Del(ctx, rlKey("repair")).Err() })
			}
			wg.Wait()
			select {
			case <-l.Done():
				lost = true
			case <-time.After(2 * ttl):
				t.Logf("try %d: still held; a renewal between the two deletions saw a quorum (keys on %v)", try, holding(t, nodes, "repair", 0, 1, 2))
			}
		}
		require.True(t, lost, "Done closed once a quorum of masters lost the key")
		require.ErrorIs(t, l.Err(), ErrLost)
		require.True(t, eventually(2*ttl, func() bool { return ownedBy(t, nodes, "repair", l.Owner(), 0, 1, 2) == 0 }))
		// A renewal still on the wire at the loss must not put it back:
		// watched for longer than two renew intervals.
		end := time.Now().Add(ttl)
		for time.Now().Before(end) {
			require.Zero(t, ownedBy(t, nodes, "repair", l.Owner(), 0, 1, 2), "a lost lock's key put back")
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// TestRedlockHealedMasterReadmitted: a Redlock over three masters behind
// proxies, on go-redis clients at their defaults (3s read timeout, no
// ContextTimeoutEnabled), four workers locking and unlocking fresh names
// all along; master 0's link is a black hole for 1.2s, twice. After each
// heal a lock is placed on master 0 again within 1s, and a free name is
// taken at once. Before, every attempt's call into the hole held a pooled
// connection for 3s (the fan-out used the client itself, not its clone
// bounded by the node timeout), thousands were queued for a connection,
// and the healed master got a key of a new lock only after they had
// drained: not within 6s.
func TestRedlockHealedMasterReadmitted(t *testing.T) {
	t.Parallel()
	nodes := make([]*rlNode, 3)
	for i, srv := range redistest.StartN(t, 3) {
		nd := &rlNode{srv: srv, admin: srv.Client(t), proxy: redistest.NewProxy(t, srv.Addr())}
		nd.client = redis.NewClient(&redis.Options{Addr: nd.proxy.Addr()})
		t.Cleanup(func() { _ = nd.client.Close() })
		nodes[i] = nd
	}
	r := newRL(t, nodes)
	warmUp(t, r)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				if l, err := r.TryLock(ctx, "w"+strconv.Itoa(w)+"-"+strconv.Itoa(i%10)); err == nil {
					_ = l.Unlock(ctx)
				}
			}
		})
	}
	probe := 0
	for heal := range 2 {
		nodes[0].proxy.Blackhole(true)
		time.Sleep(1200 * time.Millisecond) // the fault's length, not a synchronisation
		nodes[0].proxy.Blackhole(false)
		healed := time.Now()
		var took time.Duration
		// TryLock returns at a quorum: master 0's grant may come after it,
		// when masters 1 and 2 answered first. So the probes stay held,
		// and each turn looks for any of them on master 0 (the grant of an
		// earlier probe that came late counts when it is seen).
		var probes []*Lock
		var keys []string
		for took == 0 && time.Since(healed) < 5*time.Second {
			probe++
			name := "probe-" + strconv.Itoa(probe)
			start := time.Now()
			l, err := r.TryLock(context.Background(), name)
			require.NoError(t, err, "heal %d: a free name after %v", heal, time.Since(healed))
			assert.Less(t, time.Since(start), time.Second, "heal %d: TryLock of a free name", heal)
			probes, keys = append(probes, l), append(keys, rlKey(name))
			n, err := nodes[0].admin.Exists(context.Background(), keys...).Result()
			require.NoError(t, err)
			if n > 0 {
				took = time.Since(healed)
			}
			time.Sleep(5 * time.Millisecond) // a user's pace, not a synchronisation
		}
		for _, l := range probes {
			require.NoError(t, l.Unlock(context.Background()))
		}
		t.Logf("heal %d: a key on master 0 again %v after the heal", heal, took.Round(time.Millisecond))
		require.NotZero(t, took, "heal %d: no key on master 0 within 5s", heal)
		assert.Less(t, took, time.Second, "heal %d: a key on master 0 again", heal)
	}
}

// TestRedlockLateGrantsAfterCloseReleased: grants on a master whose replies
// are held back, for locks already unlocked at a quorum of the others,
// whose calls end (by the node timeout) after Close has ended its I/O, are
// released as soon as the master answers again, not at the end of their
// 30 s lease. Their releases run in the calls' own goroutines; before, each
// still counted as a call on the wire while it waited to be admitted, and
// with four or more on one master it looked stalled to all of them
// (node.Admit): none was sent until its lease ended.
func TestRedlockLateGrantsAfterCloseReleased(t *testing.T) {
	t.Parallel()
	nodes := startRLNodes(t, 3, true, time.Second)
	r := newRL(t, nodes, WithTTL(30*time.Second), WithNodeTimeout(300*time.Millisecond), WithAutoRenew(false))
	ctx := context.Background()
	const n = 6
	// n connections to master 0 dialled first: a new one would wait for
	// its handshake's reply, and send nothing, while replies are held.
	var wg sync.WaitGroup
	for range n + 2 {
		wg.Go(func() {
			// A blocking call holds its connection: n+2 at once, n+2 of them.
			assert.ErrorIs(t, nodes[0].client.Do(ctx, "BLPOP", "warm-up", "0.05").Err(), redis.Nil, "BLPOP warm-up: times out")
		})
	}
	wg.Wait()
	require.GreaterOrEqual(t, nodes[0].client.PoolStats().TotalConns, uint32(n), "connections to master 0")
	nodes[0].proxy.Hold(true) // master 0 runs the calls; its replies wait
	names := make([]string, n)
	locks := make([]*Lock, n)
	for i := range n {
		names[i] = "late-" + strconv.Itoa(i)
		wg.Go(func() {
			var err error
			locks[i], err = r.TryLock(ctx, names[i])
			assert.NoError(t, err, "TryLock(%q) at a quorum of masters 1 and 2", names[i])
		})
	}
	wg.Wait()
	for _, l := range locks {
		require.NotNil(t, l)
		require.NoError(t, l.Unlock(ctx))
	}
	left := func() int {
		k := 0
		for _, name := range names {
			k += len(holding(t, nodes, name, 0))
		}
		return k
	}
	// Four calls on the wire are enough (node.maxProbes); the pool may
	// have closed a connection or two meanwhile.
	require.True(t, eventually(5*time.Second, func() bool { return left() >= 4 }), "grants run on master 0: %d of %d", left(), n)
	require.NoError(t, r.Close())
	nodes[0].proxy.Hold(false)
	assert.True(t, eventually(5*time.Second, func() bool { return left() == 0 }),
		"keys of released locks still on master 0 (lease 30s): %d of %d", left(), n)
}
