package redlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/redistest"
)

// TestMetadata: WithMetadata is stored with the lock on a real server,
// survives renewals and Extend, follows an in-process hand-off to the new
// owner's own metadata, and is never shown for a later holder without any.
func TestMetadata(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	lk := newLocker(t, srv.Client(t), WithTTL(600*time.Millisecond))
	const name = "meta"

	l, err := lk.TryLock(ctx, name, WithMetadata("host-a pid 42"))
	require.NoError(t, err)
	assert.Equal(t, "host-a pid 42", l.Metadata())
	h, err := lk.Inspect(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, "host-a pid 42", h.Metadata)

	// Past the first lease: only renewals keep the metadata key alive.
	first := l.Until()
	require.Eventually(t, func() bool { return time.Since(first) > 200*time.Millisecond }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, l.Err(), "renewed lock")
	h, err = lk.Inspect(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, "host-a pid 42", h.Metadata, "metadata after the first lease ran out")
	pttl, err := admin.PTTL(ctx, rlKey(name)+":meta").Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, time.Duration(0), "the metadata key expires with the lock")

	require.NoError(t, l.Extend(ctx, 5*time.Second))
	pttl, err = admin.PTTL(ctx, rlKey(name)+":meta").Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, time.Second, "Extend moves the metadata's lease too")

	// An in-process hand-off: the waiter's own metadata goes with it.
	got := make(chan *Lock, 1)
	go func() {
		nl, err := lk.Lock(ctx, name, WithMetadata("host-b"))
		assert.NoError(t, err)
		got <- nl
	}()
	require.Eventually(t, func() bool { return lk.core().Waits.Busy(engine.ReleaseChannel(engine.LockKey("redlock:", name))) }, 10*time.Second, time.Millisecond)
	require.NoError(t, l.Unlock(ctx))
	nl := <-got
	require.NotNil(t, nl)
	h, err = lk.Inspect(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, nl.Owner(), h.Owner)
	assert.Equal(t, "host-b", h.Metadata)
	require.NoError(t, nl.Unlock(ctx))

	// A holder without metadata never shows an earlier holder's.
	bare, err := lk.TryLock(ctx, name)
	require.NoError(t, err)
	h, err = lk.Inspect(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, bare.Owner(), h.Owner)
	assert.Empty(t, h.Metadata)
	assert.Empty(t, bare.Metadata())
	require.NoError(t, bare.Unlock(ctx))

	_, err = lk.TryLock(ctx, name, WithMetadata(strings.Repeat("x", engine.MaxMetadata+1)))
	require.Error(t, err, "metadata over 64 KiB")
	assert.Empty(t, (*Lock)(nil).Metadata())
}

// TestMetadataRedlock: each master stores it; Inspect reports the quorum's.
func TestMetadataRedlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var clients []Client
	for range 3 {
		clients = append(clients, redistest.Start(t).Client(t))
	}
	rl, err := NewRedlock(clients, WithAutoRenew(false))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rl.Close() })
	l, err := rl.TryLock(ctx, "meta-rl", WithMetadata("job 7"))
	require.NoError(t, err)
	h, err := rl.Inspect(ctx, "meta-rl")
	require.NoError(t, err)
	assert.True(t, h.Held)
	assert.Equal(t, "job 7", h.Metadata)
	require.NoError(t, l.Unlock(ctx))
}

// TestMetadataIgnoredByOtherHolds: read holds, permits and LockAll take no
// metadata: WithMetadata given to them leaves Metadata() empty and writes
// no metadata key, while the same option on Lock does both.
func TestMetadataIgnoredByOtherHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	lk := newLocker(t, srv.Client(t))
	meta := WithMetadata("not for these")
	sem, err := lk.Semaphore("meta-permits", 2)
	require.NoError(t, err)
	holds := []struct {
		name string
		take func() (*Lock, error)
	}{
		{"RLock", func() (*Lock, error) { return lk.RLock(ctx, "meta-read", meta) }},
		{"Semaphore.Acquire", func() (*Lock, error) { return sem.Acquire(ctx, meta) }},
		{"LockAll", func() (*Lock, error) { return lk.LockAll(ctx, []string{"meta-all-a", "meta-all-b"}, meta) }},
	}
	metaKeys := func() []string {
		t.Helper()
		keys, err := admin.Keys(ctx, "*:meta").Result()
		require.NoError(t, err)
		return keys
	}
	for _, h := range holds {
		l, err := h.take()
		require.NoError(t, err, "%s()", h.name)
		assert.Empty(t, l.Metadata(), "%s().Metadata()", h.name)
		assert.Empty(t, metaKeys(), "metadata keys while %s holds", h.name)
		require.NoError(t, l.Unlock(ctx))
	}
	// The same option on Lock does store it: the checks above can fail.
	l, err := lk.Lock(ctx, "meta-plain", meta)
	require.NoError(t, err)
	assert.Equal(t, "not for these", l.Metadata())
	assert.Equal(t, []string{rlKey("meta-plain") + ":meta"}, metaKeys())
	require.NoError(t, l.Unlock(ctx))
}
