package redlock

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/internal/scripts"
)

func TestValidUntil(t *testing.T) {
	t.Parallel()
	t1 := time.Now()
	tests := []struct {
		ttl    time.Duration
		factor float64
		want   time.Duration // Until - t1
	}{
		{10 * time.Second, 0.01, 10*time.Second - 100*time.Millisecond - 2*time.Millisecond},
		{time.Second, 0.01, time.Second - 10*time.Millisecond - 2*time.Millisecond},
		{300 * time.Millisecond, 0.01, 300*time.Millisecond - 3*time.Millisecond - 2*time.Millisecond},
		{time.Second, 0, time.Second - 2*time.Millisecond},
		{100 * time.Millisecond, 0.1, 100*time.Millisecond - 10*time.Millisecond - 2*time.Millisecond},
	}
	for _, tt := range tests {
		got := engine.ValidUntil(t1, tt.ttl, tt.factor).Sub(t1)
		if got != tt.want {
			t.Errorf("validUntil(t1, %v, %v) - t1 = %v, want %v", tt.ttl, tt.factor, got, tt.want)
		}
	}
	// Validity is measured on the monotonic clock: a wall-clock step between
	// t1 and the check cannot move it.
	if u := engine.ValidUntil(t1, time.Second, 0.01); !containsMonotonic(u) {
		t.Errorf("validUntil() = %v, want a monotonic reading (m=)", u)
	}
}

// TestValidityUsesWholeMilliseconds: a TTL that is not a whole number of
// milliseconds claims no more validity than the server was given.
func TestValidityUsesWholeMilliseconds(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	assert.Equal(t, engine.ValidUntil(t0, 10*time.Millisecond, 0), engine.ValidUntil(t0, 10*time.Millisecond+999*time.Microsecond, 0))
}

// TestQuorumEveryOutcome: for 1 to 7 nodes and every way each node can
// answer (yes, no, error, no reply yet), the tally counts them, a round is
// settled exactly when a majority said yes or a majority can no longer say
// yes, and ShortOf names the count it reached. Pure: no server.
func TestQuorumEveryOutcome(t *testing.T) {
	t.Parallel()
	const (
		yes = iota
		no
		failed
		silent
	)
	for n := 1; n <= 7; n++ {
		c := &engine.Pool{Quorum: n/2 + 1}
		for i := range n {
			c.Nodes = append(c.Nodes, node.New(i, nil))
		}
		outcomes := 1
		for range n {
			outcomes *= 4
		}
		for code := range outcomes {
			var rs []engine.Reply
			var ok, refused, errs int
			for i, x := 0, code; i < n; i, x = i+1, x/4 {
				switch x % 4 {
				case yes:
					rs = append(rs, engine.Reply{Node: i, OK: true})
					ok++
				case no:
					rs = append(rs, engine.Reply{Node: i})
					refused++
				case failed:
					rs = append(rs, engine.Reply{Node: i, Err: node.ErrTimeout})
					errs++
				}
			}
			name := fmt.Sprintf("n=%d/yes=%d,no=%d,err=%d", n, ok, refused, errs)
			tl := c.Count(rs)
			if tl.OK != ok || tl.No != refused || tl.Failed != errs || len(tl.Errs) != errs {
				t.Fatalf("%s: count() = %+v", name, tl)
			}
			majority := n/2 + 1
			wantSettled := ok >= majority || refused+errs > n-majority
			if got := c.Settled(rs); got != wantSettled {
				t.Fatalf("%s: settled() = %v, want %v", name, got, wantSettled)
			}
			if got, want := c.Impossible(refused+errs), refused+errs > n-majority; got != want {
				t.Fatalf("%s: impossible(%d) = %v, want %v", name, refused+errs, got, want)
			}
			if ok < majority {
				want := fmt.Sprintf("redlock: op \"x\" reached %d of %d nodes, need %d", ok, n, majority)
				if got := c.ShortOf("op", "x", tl, "", nil).Error(); len(got) < len(want) || got[:len(want)] != want {
					t.Fatalf("%s: shortOf() = %q, want it to start with %q", name, got, want)
				}
			}
		}
	}
}

// TestTinyTTLFirstCall: a Locker warms its client up, so a first TryLock
// with a 5ms TTL is not judged by a budget a dial or a script load already
// spent: the first call dials nothing and sends no EVAL or SCRIPT LOAD, only
// the EVALSHA of the acquire script.
func TestTinyTTLFirstCall(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	for i := range 5 {
		cl := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		lk, err := NewLocker(cl, WithTTL(5*time.Millisecond), WithAutoRenew(false))
		require.NoError(t, err)
		require.GreaterOrEqual(t, cl.PoolStats().IdleConns, uint32(1), "no connection dialled ahead")
		h := &firstCallHook{}
		cl.AddHook(h)
		l, err := lk.TryLock(ctx, fmt.Sprintf("tiny-%d", i))
		h.mu.Lock()
		dials, cmds := h.dials, slices.Clone(h.cmds)
		h.mu.Unlock()
		// Whether a 5ms lease (2.95ms of validity) is obtained depends on the
		// machine's load, not on the warm-up: not asserted.
		if err != nil {
			t.Logf("TryLock(5ms) = %v", err)
		} else {
			_ = l.Unlock(ctx)
		}
		assert.Zero(t, dials, "first TryLock dialled")
		require.NotEmpty(t, cmds, "first TryLock sent nothing")
		assert.Equal(t, "evalsha", cmds[0], "first TryLock's first command (all: %v)", cmds)
		assert.NotContains(t, cmds, "eval", "first TryLock fell back to EVAL: script not loaded by the warm-up")
		assert.NotContains(t, cmds, "script", "first TryLock loaded a script")
		lk.Close()
		cl.Close()
	}
	exists, err := srv.Client(t).ScriptExists(ctx, scripts.Acquire.Hash(), scripts.Release.Hash()).Result()
	require.NoError(t, err)
	assert.Equal(t, []bool{true, true}, exists, "scripts not loaded by the warm-up")
}

// firstCallHook records the dials and the command names of a client.
type firstCallHook struct {
	mu    sync.Mutex
	dials int
	cmds  []string
}

func (h *firstCallHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.mu.Lock()
		h.dials++
		h.mu.Unlock()
		return next(ctx, network, addr)
	}
}

func (h *firstCallHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.cmds = append(h.cmds, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *firstCallHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ackClient is a client of addr whose reads wait long enough for the
// generous ack timeouts of the tests where acks must be met: on a loaded
// machine the replica's ack, relayed by the test's proxy, can take a while.
func ackClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// metAck is the ack timeout of tests whose replica must acknowledge.
const metAck = 1500 * time.Millisecond

// splitClient runs scripts on one client and pipelines on another (two
// pools of one server), so that an implementation that sent its WAIT apart
// from its script could not land on the script's connection by luck.
type splitClient struct {
	*redis.Client               // scripts (EVALSHA, EVAL, SCRIPT LOAD)
	pipes         *redis.Client // pipelines
}

func (s splitClient) Pipeline() redis.Pipeliner { return s.pipes.Pipeline() }

// TestReplicaAcksSameConnection: WAIT must run on the connection that ran
// the acquire script. With replication held, a WAIT on another connection,
// one that wrote nothing since, answers "1 replica" at once (shown first: a
// SET on one client, a WAIT on another). A script followed by a WAIT sent
// on its own would be granted that way; the lock's WAIT, in one pipeline
// with its script, counts 0, so the acquisition fails, says so, and leaves
// no key behind.
func TestReplicaAcksSameConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pair := redistest.StartPair(t)
	scripts, pipes := plainClient(t, pair.Master.Addr(), -1), plainClient(t, pair.Master.Addr(), -1)
	bystander := plainClient(t, pair.Master.Addr(), -1)
	require.NoError(t, pipes.Ping(ctx).Err())
	require.NoError(t, bystander.Ping(ctx).Err())
	lk := lockerOn(t, splitClient{Client: scripts, pipes: pipes})
	pair.HoldReplication(true)
	defer pair.HoldReplication(false)

	// (Redis counts from the first WAIT of a connection on, so the
	// demonstration spends a connection of its own, not one of pipes'.)
	require.NoError(t, scripts.Set(ctx, "acks-probe", "x", 0).Err())
	acked, err := bystander.Wait(ctx, 1, 200*time.Millisecond).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), acked, "WAIT on another connection than the SET's (the trap this test guards against)")

	start := time.Now()
	l, err := lk.TryLock(ctx, "acks-conn", WithReplicaAcks(1, 200*time.Millisecond))
	took := time.Since(start)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.Nil(t, l)
	var ae *ReplicaAcksError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, ReplicaAcksError{Acked: 0, Wanted: 1, Timeout: 200 * time.Millisecond}, *ae)
	assert.Contains(t, err.Error(), "0 of 1 replicas acknowledged within 200ms")
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "the ack count, not a timeout")
	assert.GreaterOrEqual(t, took, 200*time.Millisecond, "WAIT waited its timeout")
	n, err := pair.Master.Client(t).Exists(ctx, engine.LockKey("redlock:", "acks-conn")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the failed acquisition's key is released")
	require.NoError(t, lk.Close())
}

// TestSafetyFailoverReplicaAcks: the failover of TestSafetyFailoverLosesKey
// with WithReplicaAcks(1, ...): A's acquisition is refused with the ack
// count instead of being granted on a master whose replica never got the
// key, so when the replica is promoted and B takes the lock there, no two
// holders overlap.
func TestSafetyFailoverReplicaAcks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pair := redistest.StartPair(t)
	a := lockerOn(t, plainClient(t, pair.Master.Addr(), -1), WithTTL(time.Second), WithNodeTimeout(200*time.Millisecond))
	b := lockerOn(t, plainClient(t, pair.Replica.Addr(), -1))
	s := newScene(t)

	pair.HoldReplication(true)
	la, err := a.TryLock(ctx, "failover-acks", WithReplicaAcks(1, 300*time.Millisecond))
	s.took(la, err)
	require.ErrorIs(t, err, ErrNotObtained)
	var ae *ReplicaAcksError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, 0, ae.Acked)
	assert.Contains(t, err.Error(), "0 of 1 replicas acknowledged within 300ms")
	n, err := pair.Master.Client(t).Exists(ctx, engine.LockKey("redlock:", "failover-acks")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "A's key released on the master")

	pair.Failover(t)
	lb, err := b.TryLock(ctx, "failover-acks")
	s.took(lb, err)
	require.NoError(t, err, "B on the promoted replica: A never held the lock")
	require.NoError(t, s.write(lb))
	require.NoError(t, lb.Unlock(ctx))
	closeAll(t, a, b)
	s.check()
}

// TestReplicaAcksRenewal: while replication flows, a lock with acks is
// taken, extended and renewed as any other; once replication is held, its
// Extend fails with the ack count and stays held, its watchdog renewals
// fail, and the lock is lost at Until.
func TestReplicaAcksRenewal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pair := redistest.StartPair(t)
	const ttl = 4 * time.Second
	a := lockerOn(t, ackClient(t, pair.Master.Addr()), WithTTL(ttl), WithNodeTimeout(300*time.Millisecond), WithReplicaAcks(1, metAck))
	s := newScene(t)

	la, err := a.TryLock(ctx, "renew-acks")
	s.took(la, err)
	require.NoError(t, err, "acks met while replication flows")
	require.NoError(t, la.Extend(ctx, ttl), "Extend with acks met")
	require.NoError(t, s.write(la))
	// A watchdog renewal with acks met: Until moves past the first lease.
	first := la.Until()
	require.Eventually(t, func() bool { return la.Until().After(first) }, 10*time.Second, 10*time.Millisecond, "a renewal with acks met")
	require.NoError(t, la.Err())

	pair.HoldReplication(true)
	defer pair.HoldReplication(false)
	before := la.Until()
	err = la.Extend(ctx, ttl)
	var ae *ReplicaAcksError
	require.ErrorAs(t, err, &ae, "Extend while replication is held")
	assert.Equal(t, 1, ae.Wanted)
	assert.Contains(t, err.Error(), "of 1 replicas acknowledged within 1.5s")
	assert.NotErrorIs(t, err, ErrNotHeld, "an unacknowledged Extend is a failed attempt, not a loss")
	assert.False(t, la.Until().After(before), "an unacknowledged Extend does not move Until")

	select {
	case <-la.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("lock still held 10s after replication was held")
	}
	assert.ErrorIs(t, la.Err(), ErrLost)
	assert.False(t, la.Until().After(before), "no unacknowledged renewal moved Until")
	closeAll(t, a)
	s.check()
}

// TestReplicaAcksNoScript: after SCRIPT FLUSH (a restart, a failover), the
// acquire, Extend and renewal with acks fall back to EVAL with a WAIT of
// their own and still succeed while replication flows.
func TestReplicaAcksNoScript(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pair := redistest.StartPair(t)
	admin := pair.Master.Client(t)
	const ttl = 3 * time.Second
	a := lockerOn(t, ackClient(t, pair.Master.Addr()), WithTTL(ttl), WithReplicaAcks(1, metAck))

	require.NoError(t, admin.ScriptFlush(ctx).Err())
	l, err := a.TryLock(ctx, "acks-noscript")
	require.NoError(t, err, "TryLock after SCRIPT FLUSH")
	require.NoError(t, admin.ScriptFlush(ctx).Err())
	require.NoError(t, l.Extend(ctx, ttl), "Extend after SCRIPT FLUSH")
	require.NoError(t, admin.ScriptFlush(ctx).Err())
	first := l.Until()
	require.Eventually(t, func() bool { return l.Until().After(first) }, 10*time.Second, 10*time.Millisecond, "a renewal after SCRIPT FLUSH")
	require.NoError(t, l.Err())
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, a.Close())
}

// TestReplicaAcksWaiter: a Lock call with acks waiting behind a holder of
// the same Locker is not handed the name by Unlock's one-script hand-off,
// which sends no WAIT: with replication held, it must not get the lock.
func TestReplicaAcksWaiter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pair := redistest.StartPair(t)
	a := lockerOn(t, plainClient(t, pair.Master.Addr(), -1))
	l1, err := a.TryLock(ctx, "acks-wait")
	require.NoError(t, err)
	type result struct {
		l   *Lock
		err error
	}
	res := make(chan result, 1)
	go func() {
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		l, err := a.Lock(lctx, "acks-wait", WithReplicaAcks(1, 300*time.Millisecond))
		res <- result{l, err}
	}()
	// Queued behind l1, so that Unlock would hand the name over.
	channel := engine.ReleaseChannel(engine.LockKey("redlock:", "acks-wait"))
	require.Eventually(t, func() bool { return a.c.Waits.Busy(channel) }, 10*time.Second, 5*time.Millisecond, "the Lock call queued")
	pair.HoldReplication(true)
	defer pair.HoldReplication(false)
	require.NoError(t, l1.Unlock(ctx))
	r := <-res
	assert.Nil(t, r.l, "a lock no replica acknowledged")
	require.ErrorIs(t, r.err, ErrNotObtained)
	require.ErrorIs(t, r.err, context.DeadlineExceeded)
	require.NoError(t, a.Close())
}

// TestReplicaAcksOnRing: WithReplicaAcks works on a Ring, each WAIT on the
// connection of its key's own shard: with one shard's replication held
// back, a name on that shard is refused with the ack count, and a name on
// the other shard is granted.
func TestReplicaAcksOnRing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pairs := []*redistest.Pair{redistest.StartPair(t), redistest.StartPair(t)}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": pairs[0].Master.Addr(), "b": pairs[1].Master.Addr()}})
	t.Cleanup(func() { ring.Close() })
	lk := newLocker(t, ring, WithNodeTimeout(time.Second))
	acks := WithReplicaAcks(1, 300*time.Millisecond)
	// A name on each shard, each granted with its ack.
	var on [2]string
	for i := 0; on[0] == "" || on[1] == ""; i++ {
		require.Less(t, i, 100, "no name on each shard among 100")
		name := fmt.Sprintf("ring-acks-%d", i)
		l, err := lk.TryLock(ctx, name, acks)
		require.NoError(t, err, "TryLock(%q) with replica acks on a Ring", name)
		for s, p := range pairs {
			if p.Master.Client(t).Exists(ctx, rlKey(name)).Val() == 1 && on[s] == "" {
				on[s] = name
			}
		}
		require.NoError(t, l.Unlock(ctx))
	}
	pairs[0].HoldReplication(true)
	defer pairs[0].HoldReplication(false)
	_, err := lk.TryLock(ctx, on[0], acks)
	var ae *ReplicaAcksError
	require.ErrorAs(t, err, &ae, "TryLock(%q) on the shard whose replication is held", on[0])
	assert.Equal(t, 0, ae.Acked)
	l, err := lk.TryLock(ctx, on[1], acks)
	require.NoError(t, err, "TryLock(%q) on the other shard", on[1])
	require.NoError(t, l.Unlock(ctx))
}
