package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/redistest"
)

func TestInspectLocker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	lk := newLocker(t, srv.Client(t), WithAutoRenew(false))
	const name = "inspect-locker"

	h, err := lk.Inspect(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, Holder{}, h, "Inspect() of a name never locked")

	l, err := lk.TryLock(ctx, name, WithTTL(5*time.Second))
	require.NoError(t, err)
	h, err = lk.Inspect(ctx, name)
	require.NoError(t, err)
	assert.True(t, h.Held, "Inspect().Held while locked")
	assert.Equal(t, l.Owner(), h.Owner)
	assert.Equal(t, l.Token(), h.Token)
	assert.Greater(t, h.TTL, time.Duration(0))
	assert.LessOrEqual(t, h.TTL, 5*time.Second)
	assert.Empty(t, h.Metadata)
	assert.Zero(t, h.Readers)

	// A metadata key that does not name the holder (left by an earlier
	// one) is not the holder's.
	require.NoError(t, admin.Set(ctx, rlKey(name)+":meta", "other-owner\nhost-a pid 42", 5*time.Second).Err())
	h, err = lk.Inspect(ctx, name)
	require.NoError(t, err)
	assert.Empty(t, h.Metadata, "metadata stored by another owner")

	require.NoError(t, l.Unlock(ctx))
	h, err = lk.Inspect(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, Holder{Token: l.Token()}, h, "Inspect() after Unlock keeps the last token only")

	// A key this library did not write: no expiry.
	require.NoError(t, admin.Set(ctx, rlKey("by-hand"), "someone", 0).Err())
	h, err = lk.Inspect(ctx, "by-hand")
	require.NoError(t, err)
	assert.True(t, h.Held)
	assert.Equal(t, "someone", h.Owner)
	assert.Negative(t, h.TTL, "TTL of a key without expiry")

	// A fence counter that is not a number is reported, not read as 0.
	require.NoError(t, admin.Set(ctx, rlKey("bad-fence")+":fence", "many", 0).Err())
	_, err = lk.Inspect(ctx, "bad-fence")
	var ne *NodeError
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, 0, ne.Node)

	// The Locker's own prefix.
	pk := newLocker(t, srv.Client(t), WithKeyPrefix("other:"))
	pl, err := pk.TryLock(ctx, name)
	require.NoError(t, err)
	h, err = pk.Inspect(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, pl.Owner(), h.Owner)
	h, err = lk.Inspect(ctx, name)
	require.NoError(t, err)
	assert.False(t, h.Held, "Inspect() with the default prefix sees another prefix's lock")
}

func TestInspectBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl, _ := miniClient(t)
	lk := newLocker(t, cl)

	_, err := lk.Inspect(ctx, "")
	assert.Error(t, err, "Inspect(\"\")")

	var nilLocker *Locker
	_, err = nilLocker.Inspect(ctx, "x")
	assert.Error(t, err, "Inspect() on a nil Locker")
	_, err = (&Locker{}).Inspect(ctx, "x")
	assert.Error(t, err, "Inspect() on a zero Locker")
	var nilRedlock *Redlock
	_, err = nilRedlock.Inspect(ctx, "x")
	assert.Error(t, err, "Inspect() on a nil Redlock")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = lk.Inspect(cctx, "x")
	assert.ErrorIs(t, err, context.Canceled)

	closed, err := NewLocker(cl)
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	_, err = closed.Inspect(ctx, "x")
	assert.ErrorIs(t, err, ErrClosed)
}

func TestInspectRedlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nodes := startRLNodes(t, 3, false, time.Second)
	r := newRL(t, nodes, WithAutoRenew(false))
	const name = "inspect-redlock"

	h, err := r.Inspect(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, Holder{}, h)

	l, err := r.TryLock(ctx, name, WithTTL(5*time.Second))
	require.NoError(t, err)
	h, err = r.Inspect(ctx, name)
	require.NoError(t, err)
	assert.True(t, h.Held)
	assert.Equal(t, l.Owner(), h.Owner)
	assert.Equal(t, l.Token(), h.Token)
	assert.Greater(t, h.TTL, time.Duration(0))
	assert.LessOrEqual(t, h.TTL, 5*time.Second)
	require.NoError(t, l.Unlock(ctx))

	set := func(i int, key, v string, ttl time.Duration) {
		t.Helper()
		require.NoError(t, nodes[i].admin.Set(ctx, key, v, ttl).Err())
	}
	// Held on two of three: a quorum. TTL: the second longest lease, when
	// fewer than two masters would still hold it.
	set(0, rlKey(name), "x", 9*time.Second)
	set(1, rlKey(name), "x", 4*time.Second)
	set(2, rlKey(name), "y", 20*time.Second)
	// The largest counter on a master of the agreeing pair: Inspect may
	// settle on those two without waiting for the third.
	set(1, rlKey(name)+":fence", "99999999999999999", 0)
	h, err = r.Inspect(ctx, name)
	require.NoError(t, err)
	assert.True(t, h.Held)
	assert.Equal(t, "x", h.Owner)
	assert.Greater(t, h.TTL, 3*time.Second)
	assert.LessOrEqual(t, h.TTL, 4*time.Second)
	assert.Equal(t, int64(99999999999999999), h.Token, "Token: the largest counter among the masters that answered")

	// One owner per node: no quorum agrees, so nobody holds it.
	set(1, rlKey(name), "z", 4*time.Second)
	h, err = r.Inspect(ctx, name)
	require.NoError(t, err)
	assert.False(t, h.Held)
	assert.Empty(t, h.Owner)
	assert.Zero(t, h.TTL)

	// A paused minority costs nothing; a paused majority is an error, in
	// bounded time.
	set(1, rlKey(name), "x", 9*time.Second)
	resume := pause(t, nodes, 2)
	h, err = r.Inspect(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, "x", h.Owner)
	resume()
	resume = pause(t, nodes, 0, 1)
	defer resume()
	start := time.Now()
	_, err = r.Inspect(ctx, name)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Len(t, nodeErrors(err), 2, "Inspect() error = %v, want one NodeError per paused master", err)
}

// TestJudgeCountsFailedNodes: a master whose inspect call failed may hold
// the key, so a round is decided only when it could not tip the answer. The
// observer of an election stopped reading after a read that took a leader
// granted on a quorum including a silent master for "no leader"
// (TestObserveBlackHole failed so, rarely).
func TestJudgeCountsFailedNodes(t *testing.T) {
	t.Parallel()
	holds := func(owner string) engine.Reply {
		return engine.Reply{OK: true, Inspected: &engine.NodeHolder{Owner: owner, PTTL: 1000}}
	}
	failed := engine.Reply{Err: node.ErrTimeout}
	for _, c := range []struct {
		name    string
		replies []engine.Reply // in node order; fewer than the nodes: the rest have not replied
		nodes   int
		held    string // "" with decided: not held
		decided bool
	}{
		{"b, free, failed", []engine.Reply{holds("b"), holds(""), failed}, 3, "", false},
		{"b, free, not replied", []engine.Reply{holds("b"), holds("")}, 3, "", false},
		{"b, b, failed", []engine.Reply{holds("b"), holds("b"), failed}, 3, "b", true},
		{"free, free, failed", []engine.Reply{holds(""), holds(""), failed}, 3, "", true},
		{"b, free, free", []engine.Reply{holds("b"), holds(""), holds("")}, 3, "", true},
		{"five: b, b, free, failed, free", []engine.Reply{holds("b"), holds("b"), holds(""), failed, holds("")}, 5, "", false},
		{"five: b, free, free, failed, free", []engine.Reply{holds("b"), holds(""), holds(""), failed, holds("")}, 5, "", true},
		{"one node failed", []engine.Reply{failed}, 1, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &engine.Pool{Quorum: c.nodes/2 + 1}
			for i := range c.nodes {
				p.Nodes = append(p.Nodes, node.New(i, nil))
			}
			rs := make([]engine.Reply, len(c.replies))
			for i, r := range c.replies {
				r.Node = i
				rs[i] = r
			}
			h, decided := judge(p, rs)
			require.Equal(t, c.decided, decided)
			if decided {
				assert.Equal(t, c.held != "", h.Held)
				assert.Equal(t, c.held, h.Owner)
			}
		})
	}
}
