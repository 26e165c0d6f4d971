package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

func TestReplicaAcksOptionValidation(t *testing.T) {
	mr := miniredis.RunT(t)
	cl := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = cl.Close() })
	tests := []struct {
		name    string
		opts    []Option
		wantErr string
	}{
		{"off", []Option{WithReplicaAcks(0, 0)}, ""},
		{"one", []Option{WithReplicaAcks(1, 200*time.Millisecond)}, ""},
		{"negative replicas", []Option{WithReplicaAcks(-1, time.Second)}, "replica acks must be in [0, 1024], got -1"},
		{"absurd replicas", []Option{WithReplicaAcks(100000, time.Second)}, "replica acks must be in [0, 1024], got 100000"},
		{"no timeout", []Option{WithReplicaAcks(1, 0)}, "replica ack timeout must be at least 1ms"},
		{"sub-millisecond timeout", []Option{WithReplicaAcks(1, 500*time.Microsecond)}, "replica ack timeout must be at least 1ms"},
		{"negative timeout", []Option{WithReplicaAcks(0, -time.Second)}, "replica ack timeout must be in [0, 1m0s], got -1s"},
		{"absurd timeout", []Option{WithTTL(time.Hour), WithReplicaAcks(1, 2*time.Minute)}, "replica ack timeout must be in [0, 1m0s], got 2m0s"},
		{"timeout not below TTL", []Option{WithTTL(time.Second), WithReplicaAcks(1, time.Second)}, "replica ack timeout 1s must be shorter than TTL 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lk, err := NewLocker(cl, tt.opts...)
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.NoError(t, lk.Close())
				return
			}
			require.Error(t, err, "NewLocker")
			assert.Contains(t, err.Error(), tt.wantErr)
			// The same per call.
			lk, err = NewLocker(cl)
			require.NoError(t, err)
			defer func() { require.NoError(t, lk.Close()) }()
			l, err := lk.TryLock(context.Background(), "acks-"+tt.name, tt.opts...)
			require.Error(t, err, "TryLock")
			assert.Nil(t, l)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestReplicaAcksTimeoutBudget(t *testing.T) {
	c := defaultConfig()
	base := c.timeout(c.ttl)
	c.replicas, c.ackTimeout = 1, 250*time.Millisecond
	assert.Equal(t, base+250*time.Millisecond+waitLateness, c.timeout(c.ttl), "per-node bound with acks")
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
	n, err := pair.Master.Client(t).Exists(ctx, lockKey("redlock:", "acks-conn")).Result()
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
	n, err := pair.Master.Client(t).Exists(ctx, lockKey("redlock:", "failover-acks")).Result()
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
	channel := releaseChannel(lockKey("redlock:", "acks-wait"))
	require.Eventually(t, func() bool { return a.c.waits.busy(channel) }, 10*time.Second, 5*time.Millisecond, "the Lock call queued")
	pair.HoldReplication(true)
	defer pair.HoldReplication(false)
	require.NoError(t, l1.Unlock(ctx))
	r := <-res
	assert.Nil(t, r.l, "a lock no replica acknowledged")
	require.ErrorIs(t, r.err, ErrNotObtained)
	require.ErrorIs(t, r.err, context.DeadlineExceeded)
	require.NoError(t, a.Close())
}
