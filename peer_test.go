package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// wrappedClient is what a user's own wrapper around go-redis looks like: a
// struct embedding only what it chooses to expose.
type wrappedClient struct {
	redis.Scripter
	inner *redis.Client
}

func (w wrappedClient) Pipeline() redis.Pipeliner { return w.inner.Pipeline() }
func (w wrappedClient) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	return w.inner.Subscribe(ctx, channels...)
}

// Client asks only for what the package calls: a UniversalClient and a
// user's wrapper pass.
var (
	_ Client = redis.UniversalClient(nil)
	_ Client = wrappedClient{}
)

func TestWrappedClientLocks(t *testing.T) {
	cl, _ := miniClient(t)
	lk := newLocker(t, wrappedClient{Scripter: cl, inner: cl})
	ctx := context.Background()
	l, err := lk.TryLock(ctx, "wrapped")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
}

func TestRetryHelpers(t *testing.T) {
	assert.Negative(t, NoRetry()(0))
	lim := LimitRetry(ConstantRetry(time.Second), 3)
	assert.Equal(t, []time.Duration{time.Second, time.Second, -1, -1}, []time.Duration{lim(0), lim(1), lim(2), lim(3)})
	assert.Negative(t, LimitRetry(ConstantRetry(time.Second), 0)(0))
	assert.Equal(t, 7*time.Millisecond, LinearBackoff(7*time.Millisecond)(5))
	assert.Zero(t, ConstantRetry(-time.Second)(0))
}

// TestLimitRetryGivesUp: on a real server, Lock with LimitRetry makes n
// attempts and returns ErrNotObtained with the holder, long before its ctx
// ends; NoRetry makes one.
func TestLimitRetryGivesUp(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	holderLk := newLocker(t, srv.Client(t))
	held, err := holderLk.TryLock(ctx, "limited")
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		retry RetryFunc
		n     int
	}{
		{"NoRetry", NoRetry(), 1},
		{"LimitRetry", LimitRetry(ConstantRetry(10*time.Millisecond), 3), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &eventLog{}
			lk := newLocker(t, srv.Client(t), WithRetry(tc.retry), WithObserver(rec))
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := lk.Lock(lctx, "limited")
			require.ErrorIs(t, err, ErrNotObtained)
			require.NoError(t, lctx.Err(), "gave up before the ctx ended")
			var te *TakenError
			require.ErrorAs(t, err, &te)
			assert.Equal(t, held.Owner(), te.Owner)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			require.Len(t, rec.acquires, 1)
			assert.Equal(t, tc.n, rec.acquires[0].Attempts)
			assert.Equal(t, Contended, rec.acquires[0].Outcome)
		})
	}
	require.NoError(t, held.Unlock(ctx))
}

// TestLockTTLAndValid: the server's view of a held, extended, stolen lock.
func TestLockTTLAndValid(t *testing.T) {
	srv := redistest.Start(t)
	cl := srv.Client(t)
	ctx := context.Background()
	lk := newLocker(t, cl, WithAutoRenew(false), WithTTL(5*time.Second))
	l, err := lk.TryLock(ctx, "ttl")
	require.NoError(t, err)
	assert.Equal(t, "{redlock:ttl}", l.Key())
	d, err := l.TTL(ctx)
	require.NoError(t, err)
	assert.Greater(t, d, 3*time.Second)
	assert.LessOrEqual(t, d, 5*time.Second)
	ok, err := l.Valid(ctx)
	require.NoError(t, err)
	assert.True(t, ok)

	require.NoError(t, l.Extend(ctx, 20*time.Second))
	d, err = l.TTL(ctx)
	require.NoError(t, err)
	assert.Greater(t, d, 15*time.Second)

	require.NoError(t, cl.Set(ctx, l.Key(), "thief", time.Minute).Err())
	_, err = l.TTL(ctx)
	require.ErrorIs(t, err, ErrNotHeld)
	ok, err = l.Valid(ctx)
	require.NoError(t, err)
	assert.False(t, ok)

	var nl *Lock
	_, err = nl.TTL(ctx)
	assert.ErrorIs(t, err, ErrNotHeld)
	ok, _ = nl.Valid(ctx)
	assert.False(t, ok)
}

// TestRedlockTTLAndTaken: a Redlock's TTL is what a quorum grants; a
// refusal names the holder and the refusing masters.
func TestRedlockTTLAndTaken(t *testing.T) {
	nodes := startRLNodes(t, 3, false, time.Second)
	r := newRL(t, nodes, WithAutoRenew(false), WithTTL(10*time.Second))
	ctx := context.Background()
	l, err := r.TryLock(ctx, "rl-ttl")
	require.NoError(t, err)
	// TryLock returns once a quorum granted: the third grant may still be
	// on its way (on a loaded machine, behind the calls below).
	for _, n := range nodes {
		require.True(t, eventually(5*time.Second, func() bool {
			return n.admin.Get(ctx, rlKey("rl-ttl")).Val() == l.Owner()
		}), "every master holds the key")
	}
	// Shorten the lease on one master: the quorum's lease is the other two's
	// shorter one, not the shortest.
	require.NoError(t, nodes[0].admin.PExpire(ctx, rlKey("rl-ttl"), time.Second).Err())
	require.NoError(t, nodes[1].admin.PExpire(ctx, rlKey("rl-ttl"), 30*time.Second).Err())
	d, err := l.TTL(ctx)
	require.NoError(t, err)
	assert.Greater(t, d, 5*time.Second)
	assert.LessOrEqual(t, d, 10*time.Second)

	_, err = r.TryLock(ctx, "rl-ttl")
	var te *TakenError
	require.ErrorAs(t, err, &te)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.Equal(t, l.Owner(), te.Owner)
	// The attempt settles once a majority refused.
	assert.GreaterOrEqual(t, len(te.Nodes), 2, "refusing masters %v", te.Nodes)
	assert.Subset(t, []int{0, 1, 2}, te.Nodes)
	assert.Positive(t, te.TTL)
	assert.LessOrEqual(t, te.TTL, 10*time.Second, "the shortest lease among the refusing masters")

	require.NoError(t, nodes[2].admin.Del(ctx, rlKey("rl-ttl")).Err())
	require.NoError(t, nodes[1].admin.Del(ctx, rlKey("rl-ttl")).Err())
	_, err = l.TTL(ctx)
	require.ErrorIs(t, err, ErrNotHeld)
}
