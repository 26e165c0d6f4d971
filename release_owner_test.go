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

// TestReleaseLocker: Release frees a lock only for its owner, and wakes the
// waiters of another process (release_owner.go, Locker.Release: "It runs
// the same script as [Lock.Unlock] (waiters are woken)"); the holder hears
// the loss. The holder's lease is 30s and the waiter's retry policy sleeps
// an hour, capped at that lease: only the release message can wake the
// waiter within the 5s it is given.
func TestReleaseLocker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	// Renewals every 250ms: the holder finds its key gone soon even without
	// its tracking connection.
	holder := newLocker(t, srv.Client(t), WithTTL(30*time.Second), WithRenewInterval(250*time.Millisecond))
	operator := newLocker(t, srv.Client(t))
	const name = "release-locker"

	err := operator.Release(ctx, name, "nobody")
	assert.ErrorIs(t, err, ErrNotHeld, "Release() of a free name")

	l, err := holder.TryLock(ctx, name)
	require.NoError(t, err)
	err = operator.Release(ctx, name, "someone-else")
	assert.ErrorIs(t, err, ErrNotHeld, "Release() with the wrong owner")
	assert.Equal(t, l.Owner(), get(t, admin, rlKey(name)), "the holder's key after a wrong-owner Release")

	// A waiter of another process, queued on the server and listening for
	// the release before it is sent: a message sent earlier would reach
	// nobody, and the waiter would sleep out the 30s lease.
	waiter := newLocker(t, srv.Client(t), WithAutoRenew(false), WithRetry(hourRetry))
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		wl, err := waiter.Lock(wctx, name)
		if err == nil {
			err = wl.Unlock(ctx)
		}
		got <- err
	}()
	queue, channel := rlKey(name)+scripts.QueueSuffix, engine.ReleaseChannel(rlKey(name))
	require.True(t, eventually(10*time.Second, func() bool {
		return admin.Type(ctx, queue).Val() == "zset" && waiter.c.Waits.PS.Listening(channel)
	}), "the waiter queued on %s and listening on %s", queue, channel)

	require.NoError(t, operator.Release(ctx, name, l.Owner()))
	released := time.Now()
	select {
	case err := <-got:
		require.NoError(t, err, "waiter's Lock() after Release")
		t.Logf("the waiter got the lock %v after Release", time.Since(released))
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken within 5s of Release (the holder's lease: 30s)")
	}
	// The holder hears the loss (tracking connection, else its next renewal).
	waitDone(t, l, 5*time.Second)
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
