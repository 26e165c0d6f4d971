package redlock

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/redistest"
)

// TestVerifyConfirmsThroughClient: a read on a tracking data connection
// that finds a held lock gone (a connection left on a server that is no
// longer the master, which lacks the key) does not lose the lock: the read
// through the node's own client, which reaches the master, says it is
// ours. A key really gone is still a loss.
func TestVerifyConfirmsThroughClient(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stale := redistest.Start(t).Client(t) // another server: none of the keys
	lk := newLocker(t, srv.Client(t), WithLossTracking(false))
	ctx := context.Background()
	l, err := lk.TryLock(ctx, "confirm")
	require.NoError(t, err)
	v := &engine.Verifier{Pool: lk.c.Pool, Abandon: lk.c.Abandon, DataDone: func(node.Client, error) {}}

	v.Verify([]*engine.Hold{l.ref()}, []node.Client{stale})
	require.NoError(t, l.Err(), "lock lost on the word of a data connection to another server")

	require.NoError(t, srv.Client(t).Del(ctx, l.Key()).Err())
	v.Verify([]*engine.Hold{l.ref()}, []node.Client{stale})
	require.ErrorIs(t, l.Err(), ErrLost, "a key gone on the master too")
}
