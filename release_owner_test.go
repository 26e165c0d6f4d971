package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/internal/scripts"
)

func TestReleaseLocker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	holder := newLocker(t, srv.Client(t))
	operator := newLocker(t, srv.Client(t))
	const name = "release-locker"

	err := operator.Release(ctx, name, "nobody")
	assert.ErrorIs(t, err, ErrNotHeld, "Release() of a free name")

	l, err := holder.TryLock(ctx, name, WithTTL(1500*time.Millisecond))
	require.NoError(t, err)
	err = operator.Release(ctx, name, "someone-else")
	assert.ErrorIs(t, err, ErrNotHeld, "Release() with the wrong owner")
	assert.Equal(t, l.Owner(), get(t, admin, rlKey(name)), "the holder's key after a wrong-owner Release")

	// A waiter of another process wakes on the release message.
	waiter := newLocker(t, srv.Client(t))
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		wl, err := waiter.Lock(wctx, name, WithAutoRenew(false))
		if err == nil {
			err = wl.Unlock(ctx)
		}
		got <- err
	}()

	require.NoError(t, operator.Release(ctx, name, l.Owner()))
	select {
	case err := <-got:
		require.NoError(t, err, "waiter's Lock() after Release")
	case <-time.After(20 * time.Second):
		t.Fatal("waiter did not get the lock within 20s of Release")
	}
	// The holder's watchdog finds the key gone at its next renewal.
	select {
	case <-l.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("holder's Done not closed within 20s of Release")
	}
	assert.ErrorIs(t, l.Err(), ErrLost)
	assert.ErrorIs(t, operator.Release(ctx, name, l.Owner()), ErrNotHeld, "second Release()")
}

// TestReleaseHolderUnlock: the holder of a lock an operator released
// learns it was not held when it unlocks (no released marker of its owner
// value makes its Unlock read as its own earlier release).
func TestReleaseHolderUnlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t), WithAutoRenew(false))
	l, err := lk.TryLock(ctx, "release-unlock")
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx, "release-unlock", l.Owner()))
	assert.ErrorIs(t, l.Unlock(ctx), ErrNotHeld, "holder's Unlock() after an operator's Release()")
}

// TestReleaseReadHoldAndPermit: Release frees a read hold or a semaphore
// permit by its owner value, wakes the waiter it was blocking, and leaves
// the other holds of the name alone; the holder's own Unlock then reports
// not held.
func TestReleaseReadHoldAndPermit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	holder := newLocker(t, srv.Client(t), WithAutoRenew(false))
	operator := newLocker(t, srv.Client(t))
	waiter := newLocker(t, srv.Client(t), WithAutoRenew(false), WithRetry(ConstantRetry(time.Hour)))

	t.Run("read hold", func(t *testing.T) {
		const name = "release-read"
		r1, err := holder.TryRLock(ctx, name)
		require.NoError(t, err)
		r2, err := holder.TryRLock(ctx, name)
		require.NoError(t, err)
		assert.ErrorIs(t, operator.Release(ctx, name, "someone-else"), ErrNotHeld, "Release() with the wrong owner")

		require.NoError(t, operator.Release(ctx, name, r1.Owner()))
		h, err := operator.Inspect(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, 1, h.Readers, "read holds after releasing one of two")
		assert.ErrorIs(t, r1.Unlock(ctx), ErrNotHeld, "holder's Unlock() of the released read hold")

		// The writer waits for the last read hold; releasing it wakes the
		// writer by message (its retry policy sleeps an hour).
		got := make(chan error, 1)
		go func() {
			l, err := waiter.Lock(ctx, name)
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
		waiting(t, waiter.c, name)
		waitSubscribers(t, srv, rlKey(name)+":rel", 1)
		require.NoError(t, operator.Release(ctx, name, r2.Owner()))
		select {
		case err := <-got:
			require.NoError(t, err, "writer's Lock() after the last read hold was released")
		case <-time.After(10 * time.Second):
			t.Fatal("writer not woken within 10s of releasing the last read hold")
		}
		assert.ErrorIs(t, operator.Release(ctx, name, r2.Owner()), ErrNotHeld, "second Release()")
	})

	t.Run("permit", func(t *testing.T) {
		const name = "release-permit"
		sem, err := holder.Semaphore(name, 1)
		require.NoError(t, err)
		p, err := sem.TryAcquire(ctx)
		require.NoError(t, err)
		wsem, err := waiter.Semaphore(name, 1)
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			l, err := wsem.Acquire(ctx)
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
		require.Eventually(t, func() bool {
			return waiter.c.Waits.Busy(engine.QueueKey(engine.ReleaseChannel(rlKey(name)+scripts.SemSuffix), engine.QueuePermits))
		},
			10*time.Second, time.Millisecond, "permit waiter not queued")
		waitSubscribers(t, srv, rlKey(name)+scripts.SemSuffix+":rel", 1)
		require.NoError(t, operator.Release(ctx, name, p.Owner()))
		select {
		case err := <-got:
			require.NoError(t, err, "waiter's Acquire() after the permit was released")
		case <-time.After(10 * time.Second):
			t.Fatal("permit waiter not woken within 10s of Release")
		}
		assert.ErrorIs(t, p.Unlock(ctx), ErrNotHeld, "holder's Unlock() of the released permit")
		assert.ErrorIs(t, operator.Release(ctx, name, p.Owner()), ErrNotHeld, "second Release()")
	})
}

func TestReleaseBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl, _ := miniClient(t)
	lk := newLocker(t, cl)
	assert.Error(t, lk.Release(ctx, "", "o"), "Release() with an empty name")
	assert.Error(t, lk.Release(ctx, "x", ""), "Release() with an empty owner")
	var nilLocker *Locker
	assert.Error(t, nilLocker.Release(ctx, "x", "o"), "Release() on a nil Locker")
	var nilRedlock *Redlock
	assert.Error(t, nilRedlock.Release(ctx, "x", "o"), "Release() on a nil Redlock")
	closed, err := NewLocker(cl)
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	assert.ErrorIs(t, closed.Release(ctx, "x", "o"), ErrClosed)
}

func TestReleaseRedlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nodes := startRLNodes(t, 3, false, time.Second)
	holder := newRL(t, nodes, WithAutoRenew(false))
	operator := newRL(t, nodes)
	const name = "release-redlock"

	// Leases far longer than any wait below, so that a key gone was released,
	// not expired.
	l, err := holder.TryLock(ctx, name, WithTTL(time.Minute))
	require.NoError(t, err)
	// TryLock returns at a quorum; the third master's grant may land later.
	require.True(t, eventually(5*time.Second, func() bool { return ownedBy(t, nodes, name, l.Owner(), 0, 1, 2) == 3 }),
		"the holder's key on every master")
	assert.ErrorIs(t, operator.Release(ctx, name, "wrong"), ErrNotHeld)
	require.NoError(t, operator.Release(ctx, name, l.Owner()))
	// Release returns at a quorum too; the third answer may come later.
	assert.True(t, eventually(5*time.Second, func() bool { return len(holding(t, nodes, name, 0, 1, 2)) == 0 }),
		"nodes still holding the key after Release: %v", holding(t, nodes, name, 0, 1, 2))

	// A leftover key on a minority is not a held lock, but goes all the same.
	require.NoError(t, nodes[1].admin.Set(ctx, rlKey(name), "leftover", time.Minute).Err())
	err = operator.Release(ctx, name, "leftover")
	assert.ErrorIs(t, err, ErrNotHeld)
	// Settled by the two "not held" answers, maybe before node 1's.
	assert.True(t, eventually(5*time.Second, func() bool { return len(holding(t, nodes, name, 0, 1, 2)) == 0 }),
		"the leftover key was not released within 5s")
}
