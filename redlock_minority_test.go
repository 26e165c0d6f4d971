package redlock

import (
	"context"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	base := evalshaCalls(t, nodes[1])
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
	require.True(t, eventually(5*time.Second, func() bool { return evalshaCalls(t, nodes[1]) >= base+waiters }))
	before := evalshaCalls(t, nodes[1])
	hold := time.Second
	time.Sleep(hold) // the holder holds: this is the interval under test, not a synchronisation
	during := evalshaCalls(t, nodes[1]) - before
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

// evalshaCalls is how many EVALSHA calls nd's server has run.
func evalshaCalls(t *testing.T, nd *rlNode) int {
	t.Helper()
	m := regexp.MustCompile(`cmdstat_evalsha:calls=(\d+)`).FindStringSubmatch(nd.srv.Info(t, "commandstats"))
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}
