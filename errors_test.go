package redlock

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/redistest"
)

// clauseSep splits an error's text into its clauses.
var clauseSep = regexp.MustCompile(`: |; `)

// requireOneLine fails unless err prints on one line, says "redlock:"
// once, and repeats no clause.
func requireOneLine(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	s := err.Error()
	assert.NotContains(t, s, "\n", "error on several lines: %q", s)
	assert.LessOrEqual(t, strings.Count(s, "redlock: "), 1, "prefix repeated: %q", s)
	seen := map[string]bool{}
	for _, c := range clauseSep.Split(s, -1) {
		c = strings.TrimSpace(c)
		if len(c) < 4 {
			continue
		}
		assert.False(t, seen[c], "clause %q repeated in %q", c, s)
		seen[c] = true
	}
}

// TestErrorsOneLine: the errors the public API returns in the fault
// scenarios each print on one line, name the operation and the lock, and
// say each cause once; errors.Is and errors.As still find every sentinel
// and type in them.
func TestErrorsOneLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	lk := newLocker(t, cl, WithTTL(time.Second), WithRenewInterval(50*time.Millisecond))
	other := newLocker(t, srv.Client(t))

	held, err := lk.Lock(ctx, "held")
	require.NoError(t, err)
	_, err = other.TryLock(ctx, "held")
	requireOneLine(t, err)
	var te *TakenError
	require.ErrorAs(t, err, &te)
	assert.Contains(t, err.Error(), `lock "held" not obtained`)
	var ne *NodeError
	assert.ErrorAs(t, err, &ne, "the quiet per-node refusal is still there")

	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = other.Lock(wctx, "held")
	cancel()
	requireOneLine(t, err)
	require.ErrorIs(t, err, ErrNotObtained)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// Lost under Do: fn returns its ctx's error, the loss prints once.
	err = lk.Do(ctx, "do", func(fctx context.Context) error {
		cl.Del(ctx, "{redlock:do}")
		<-fctx.Done()
		return fctx.Err()
	})
	requireOneLine(t, err)
	require.ErrorIs(t, err, ErrLost)
	require.ErrorIs(t, err, LossDeleted)
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), `lock "do" lost`)

	// Unlock and Extend of a lock whose key is gone.
	cl.Del(ctx, "{redlock:held}")
	err = held.Extend(ctx, time.Second)
	requireOneLine(t, err)
	require.ErrorIs(t, err, ErrNotHeld)
	assert.Contains(t, err.Error(), `"held"`)
	err = held.Unlock(ctx)
	requireOneLine(t, err)
	require.ErrorIs(t, err, ErrNotHeld)

	// A paused server (SIGSTOP): timeouts.
	paused := redistest.Start(t)
	pl := newLocker(t, redis.NewClient(&redis.Options{Addr: paused.Addr(), MaxRetries: -1}), WithNodeTimeout(100*time.Millisecond))
	paused.Pause(t)
	_, err = pl.TryLock(ctx, "p")
	requireOneLine(t, err)
	require.ErrorIs(t, err, ErrNotObtained)
	_, err = pl.Inspect(ctx, "p")
	requireOneLine(t, err)
	assert.Contains(t, err.Error(), `inspect "p"`)
	requireOneLine(t, pl.Ping(ctx))
	paused.Resume(t)

	// A Redlock with a majority down, and a server that is not running.
	rnodes := redistest.StartN(t, 3)
	clients := []Client{rnodes[0].Client(t), rnodes[1].Client(t), rnodes[2].Client(t)}
	rl, err := NewRedlock(clients, WithNodeTimeout(200*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { rl.Close() })
	rnodes[1].Kill(t)
	rnodes[2].Kill(t)
	_, err = rl.TryLock(ctx, "r")
	requireOneLine(t, err)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.Len(t, nodeErrors(err), 2, "%v", err)
	requireOneLine(t, rl.Ping(ctx))
	_, err = rl.Lock(ctx, "r", WithUnansweredLimit(300*time.Millisecond))
	requireOneLine(t, err)
	require.ErrorIs(t, err, ErrUnreachable)

	// An operator's Release of a name another owner holds.
	err = other.Release(ctx, "held2", "nobody")
	requireOneLine(t, err)
	require.ErrorIs(t, err, ErrNotHeld)
	assert.Contains(t, err.Error(), `release "held2"`)

	// Closed.
	closed := newLocker(t, srv.Client(t))
	require.NoError(t, closed.Close())
	_, err = closed.Lock(ctx, "c")
	requireOneLine(t, err)
	require.ErrorIs(t, err, ErrClosed)
}

// TestJoinOneLine: join prints the head in full and the rest once each,
// without their prefixes, and flattens nested joins.
func TestJoinOneLine(t *testing.T) {
	t.Parallel()
	a := errors.New("redlock: node 0: boom")
	err := join(notObtained("n"), a, join(errors.New("redlock: node 0: boom"), context.Canceled), nil, quietError{node.ErrTaken})
	assert.Equal(t, `redlock: lock "n" not obtained: node 0: boom; context canceled`, err.Error())
	assert.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorIs(t, err, a)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, node.ErrTaken)
	assert.Nil(t, join(nil, nil))

	// Nodes that failed alike read as one clause, also at the head.
	boom := errors.New("boom")
	nodes := join(&NodeError{Node: 0, Err: boom}, &NodeError{Node: 1, Err: boom}, &NodeError{Node: 2, Err: context.Canceled})
	assert.Equal(t, "redlock: node 0, node 1: boom; node 2: context canceled", nodes.Error())
}
