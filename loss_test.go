package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// TestLossReasons: each way a lock is lost on a real server says so.
func TestLossReasons(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	ctx := context.Background()
	const renew = 50 * time.Millisecond
	lk := newLocker(t, cl, WithTTL(3*time.Second), WithRenewInterval(renew))

	t.Run("deleted", func(t *testing.T) {
		l, err := lk.TryLock(ctx, "loss-deleted")
		require.NoError(t, err)
		require.NoError(t, cl.Del(ctx, "{redlock:loss-deleted}").Err())
		waitDone(t, l, 3*time.Second)
		requireLoss(t, l.Err(), LossDeleted)
		assert.NotErrorIs(t, l.Err(), ErrClosed)
	})
	t.Run("taken", func(t *testing.T) {
		l, err := lk.TryLock(ctx, "loss-taken")
		require.NoError(t, err)
		require.NoError(t, cl.Set(ctx, "{redlock:loss-taken}", "someone-else", 10*time.Second).Err())
		waitDone(t, l, 3*time.Second)
		requireLoss(t, l.Err(), LossTaken)
		assert.Equal(t, "someone-else", get(t, cl, "{redlock:loss-taken}"), "other owner's key")
	})
	t.Run("extend finds it taken", func(t *testing.T) {
		l, err := lk.TryLock(ctx, "loss-extend", WithAutoRenew(false))
		require.NoError(t, err)
		require.NoError(t, cl.Set(ctx, "{redlock:loss-extend}", "someone-else", 10*time.Second).Err())
		err = l.Extend(ctx, time.Second)
		require.ErrorIs(t, err, ErrNotHeld)
		requireLoss(t, err, LossTaken)
		requireLoss(t, l.Err(), LossTaken)
	})
	t.Run("lease ran out", func(t *testing.T) {
		l, err := lk.TryLock(ctx, "loss-lease", WithAutoRenew(false), WithTTL(100*time.Millisecond))
		require.NoError(t, err)
		waitDone(t, l, 3*time.Second)
		requireLoss(t, l.Err(), LossExpired)
	})
}

// TestLossReasonUnreachable: a paused server makes the lock expire, and the
// loss carries the failed renewals' error.
func TestLossReasonUnreachable(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t), WithTTL(600*time.Millisecond), WithNodeTimeout(100*time.Millisecond))
	l, err := lk.TryLock(context.Background(), "loss-paused")
	require.NoError(t, err)
	srv.Pause(t)
	defer srv.Resume(t)
	waitDone(t, l, 3*time.Second)
	le := requireLoss(t, l.Err(), LossExpired)
	assert.Error(t, le.Err, "what the renewals heard")
}

// TestLossWhenPausedEveryKind: a read hold, a permit and a LockAll lock
// whose server stops answering past their TTL are reported lost, as an
// exclusive lock is (TestLossReasonUnreachable).
func TestLossWhenPausedEveryKind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		take func(ctx context.Context, lk *Locker) (*Lock, error)
	}{
		{"read hold", func(ctx context.Context, lk *Locker) (*Lock, error) { return lk.TryRLock(ctx, "paused") }},
		{"permit", func(ctx context.Context, lk *Locker) (*Lock, error) {
			s, err := lk.Semaphore("paused", 2)
			if err != nil {
				return nil, err
			}
			return s.TryAcquire(ctx)
		}},
		{"LockAll", func(ctx context.Context, lk *Locker) (*Lock, error) {
			return lk.TryLockAll(ctx, []string{"paused-a", "paused-b"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			lk := newLocker(t, srv.Client(t), WithTTL(600*time.Millisecond), WithNodeTimeout(100*time.Millisecond))
			l, err := tc.take(context.Background(), lk)
			require.NoError(t, err)
			srv.Pause(t)
			defer srv.Resume(t)
			waitDone(t, l, 3*time.Second)
			requireLoss(t, l.Err(), LossExpired)
		})
	}
}

// TestLossReasonClosed: Close under a held lock and under Do.
func TestLossReasonClosed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk, err := NewLocker(srv.Client(t))
	require.NoError(t, err)
	ctx := context.Background()
	l, err := lk.TryLock(ctx, "loss-closed")
	require.NoError(t, err)

	started := make(chan struct{})
	result := make(chan error, 1)
	causes := make(chan error, 1)
	go func() {
		result <- lk.Do(ctx, "loss-closed-do", func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil
		})
	}()
	<-started
	require.NoError(t, lk.Close())
	for _, err := range []error{l.Err(), <-causes, <-result} {
		requireLoss(t, err, LossClosed)
		assert.ErrorIs(t, err, ErrClosed)
		assert.ErrorIs(t, err, ErrReleased)
	}
}

// TestMaxHold: the watchdog stops at the cap, the loss says why, Done closes
// by Until, the name is free at once for others, and Do's ctx says the same.
func TestMaxHold(t *testing.T) {
	srv := redistest.Start(t)
	cl := srv.Client(t)
	ctx := context.Background()
	const hold = 400 * time.Millisecond
	// A lease of 5s renewed every 100ms until the cap: left alone, the key
	// would stay more than 4.5s after it.
	lk := newLocker(t, cl, WithTTL(5*time.Second), WithRenewInterval(100*time.Millisecond), WithMaxHold(hold))
	other := newLocker(t, cl)

	start := time.Now()
	l, err := lk.TryLock(ctx, "max-hold")
	require.NoError(t, err)
	waitDone(t, l, 5*time.Second)
	assert.GreaterOrEqual(t, time.Since(start), hold, "lost before the cap")
	assert.False(t, time.Now().After(l.Until().Add(timerSlack)), "Done closed after Until")
	requireLoss(t, l.Err(), LossMaxHold)
	require.ErrorIs(t, l.Extend(ctx, time.Second), ErrNotHeld)

	// Released by the library: the key goes, and another owner gets the
	// name, long before the lease would have run out.
	require.True(t, eventually(2*time.Second, func() bool { return cl.Exists(ctx, rlKey("max-hold")).Val() == 0 }),
		"the key still on the server 2s after the max hold")
	ol, err := other.TryLock(ctx, "max-hold")
	require.NoError(t, err, "other TryLock() after the max hold")
	require.NoError(t, ol.Unlock(ctx))

	var cause error
	err = lk.Do(ctx, "max-hold-do", func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(5 * time.Second):
			t.Error("Do's ctx not cancelled at the max hold")
		}
		return nil
	})
	requireLoss(t, err, LossMaxHold)
	requireLoss(t, cause, LossMaxHold)

	// Without renewals the cap still applies, and Until still bounds it.
	l, err = lk.TryLock(ctx, "max-hold-short", WithAutoRenew(false), WithTTL(200*time.Millisecond), WithMaxHold(time.Hour))
	require.NoError(t, err)
	waitDone(t, l, 3*time.Second)
	requireLoss(t, l.Err(), LossExpired)
}

// TestRedlockLossQuorum: on three masters, one loses the key and another
// hands it to someone else: a mixed answer is a lost quorum; the same
// answer everywhere names it. TryLock returns at a quorum of grants, so
// the test waits for the third before it changes keys: an acquire still on
// its way would set the key again after the DEL (seen under busy-test).
func TestRedlockLossQuorum(t *testing.T) {
	t.Parallel()
	nodes := startRLNodes(t, 3, false, time.Second)
	r := newRL(t, nodes, WithTTL(3*time.Second), WithRenewInterval(50*time.Millisecond))
	ctx := context.Background()

	l, err := r.TryLock(ctx, "rl-mixed")
	require.NoError(t, err)
	require.True(t, eventually(5*time.Second, func() bool { return ownedBy(t, nodes, "rl-mixed", l.Owner(), 0, 1, 2) == 3 }))
	require.NoError(t, nodes[0].admin.Del(ctx, rlKey("rl-mixed")).Err())
	require.NoError(t, nodes[1].admin.Set(ctx, rlKey("rl-mixed"), "someone-else", 10*time.Second).Err())
	waitDone(t, l, 3*time.Second)
	requireLoss(t, l.Err(), LossQuorum)

	l, err = r.TryLock(ctx, "rl-taken")
	require.NoError(t, err)
	require.True(t, eventually(5*time.Second, func() bool { return ownedBy(t, nodes, "rl-taken", l.Owner(), 0, 1, 2) == 3 }))
	for _, i := range []int{0, 2} {
		require.NoError(t, nodes[i].admin.Set(ctx, rlKey("rl-taken"), "someone-else", 10*time.Second).Err())
	}
	waitDone(t, l, 3*time.Second)
	requireLoss(t, l.Err(), LossTaken)
}

func TestLossReasonText(t *testing.T) {
	t.Parallel()
	err := &LostError{Name: "n", Reason: LossDeleted, Err: errors.New("boom")}
	assert.Equal(t, `redlock: lock "n" lost: key deleted or expired on the server: boom`, err.Error())
	assert.Equal(t, "LossReason(99)", LossReason(99).String())
	assert.NotErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, &LostError{Reason: LossClosed}, ErrClosed)
}

// TestErrExactWhileLossClockStalled: Err says ErrLost from Until on by the
// clock alone. The loss clock normally closes Done ahead of Until, so here
// its loop is held (a test hook) as it comes to the lock: Done stays open,
// and Err read after Until must still report the loss, closing Done.
func TestErrExactWhileLossClockStalled(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t), WithTTL(300*time.Millisecond), WithAutoRenew(false))
	stall, stalled := make(chan struct{}), make(chan struct{}, 1)
	lk.c.Exp.BeforeExpire = func() {
		select {
		case stalled <- struct{}{}:
		default:
		}
		<-stall
	}
	defer close(stall) // before the Locker's Close (a cleanup)
	l, err := lk.TryLock(context.Background(), "exact-stalled")
	require.NoError(t, err)
	select {
	case <-stalled:
	case <-time.After(5 * time.Second):
		t.Fatal("the loss clock never came to the lock")
	}
	select {
	case <-l.Done():
		t.Fatal("Done() closed while the loss clock is held")
	default:
	}
	requireLostAfterUntil(t, l)
}

// requireLostAfterUntil waits for the clock to pass l's Until (the clock
// itself is what is under test), then requires Err to say lost and Done to
// be closed.
func requireLostAfterUntil(t *testing.T, l *Lock) {
	t.Helper()
	for time.Now().Before(l.Until()) {
		time.Sleep(time.Until(l.Until()))
	}
	require.ErrorIs(t, l.Err(), ErrLost, "Err() after Until")
	select {
	case <-l.Done():
	default:
		t.Fatal("Done() open after Err() reported the loss")
	}
}
