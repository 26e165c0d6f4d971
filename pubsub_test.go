package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// TestUncontendedLockSkipsPubSub: a Lock that gets the lock at once opens no
// pub/sub connection and subscribes nothing, the tracking connection
// (internal/engine/track.go) included: it opens only for locks held longer.
func TestUncontendedLockSkipsPubSub(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t))
	ctx := context.Background()
	for range 100 {
		l, err := lk.Lock(ctx, "alone")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	assert.Zero(t, commandCalls(t, srv, "subscribe"), "SUBSCRIBE calls for 100 uncontended Lock calls")
}

// TestWaitWakesOnRelease: a waiter sleeps through a long hold without
// polling, then gets the lock right after the release.
func TestWaitWakesOnRelease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	holderLk := newLocker(t, srv.Client(t))
	wcl := srv.Client(t)
	hook := &countingHook{}
	wcl.AddHook(hook)
	waiterLk := newLocker(t, wcl)
	ctx := context.Background()

	h, err := holderLk.TryLock(ctx, "wake")
	if err != nil {
		t.Fatalf("TryLock() = %v", err)
	}
	got := make(chan time.Time, 1)
	go func() {
		l, err := waiterLk.Lock(ctx, "wake")
		got <- time.Now()
		if err != nil {
			t.Errorf("waiter Lock() = %v", err)
			return
		}
		l.Unlock(ctx)
	}()
	waiting(t, waiterLk.c, "wake")
	time.Sleep(500 * time.Millisecond) // the hold being measured, not a synchronisation
	attempts := hook.scripts.Load()
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}
	released := time.Now()
	acquiredAt := <-got
	if gap := acquiredAt.Sub(released); gap > 100*time.Millisecond {
		t.Errorf("waiter acquired %v after the release, want within a few round trips", gap)
	}
	// Polling every 4..512ms would take ~7 attempts in 500ms; waiting on
	// pub/sub takes the first try and one poll that covers the SUBSCRIBE race.
	if attempts > 3 {
		t.Errorf("waiter made %d attempts during a 500ms hold, want <= 3", attempts)
	}
	t.Logf("hand-off %v after release; %d attempts during the hold", acquiredAt.Sub(released), attempts)
}

// TestWaitPubSubDropped: the pub/sub connection is killed while a goroutine
// waits; the waiter still gets the lock after the release (reconnect or
// polling fallback).
func TestWaitPubSubDropped(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t))
	other := newLocker(t, srv.Client(t))
	ctx := context.Background()
	h, err := other.TryLock(ctx, "dropped")
	if err != nil {
		t.Fatalf("TryLock() = %v", err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := lk.Lock(ctx, "dropped")
		if err == nil {
			l.Unlock(ctx)
		}
		got <- err
	}()
	waiting(t, lk.c, "dropped")
	srv.Do(t, "CLIENT", "KILL", "TYPE", "pubsub")
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("waiter Lock() = %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("waiter did not get the lock within 3s of the release after its pub/sub connection died")
	}
}
