package redlock

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/redistest"
)

// TestFenceCounterExhausted: at 2^53-1 a Lua double cannot count up by
// one; the acquisition fails with a clear error and sets nothing.
func TestFenceCounterExhausted(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	lk := newLocker(t, srv.Client(t))
	ctx := context.Background()
	const top = 1<<53 - 1
	require.NoError(t, admin.Set(ctx, "{redlock:top}:fence", top-1, 0).Err())
	l, err := lk.TryLock(ctx, "top")
	require.NoError(t, err, "TryLock() one below the top")
	assert.Equal(t, int64(top), l.Token())
	require.NoError(t, l.Unlock(ctx))

	_, err = lk.TryLock(ctx, "top")
	require.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorIs(t, err, node.ErrTokenSpace)
	assert.Zero(t, admin.Exists(ctx, "{redlock:top}").Val(), "lock key set although no token could be minted")
	_, err = lk.Lock(ctx, "top")
	assert.ErrorIs(t, err, node.ErrTokenSpace, "Lock() gives up at once: waiting cannot help")

	// Lua's tonumber reads "nan", "inf" and "1e400" as numbers: none is a
	// counter (a NaN counter would hand every owner the same token).
	for _, junk := range []string{"not-a-number", "nan", "inf", "-inf", "1e400"} {
		require.NoError(t, admin.Set(ctx, "{redlock:junk}:fence", junk, 0).Err())
		_, err = lk.TryLock(ctx, "junk")
		assert.ErrorIs(t, err, ErrNotObtained, "fence %q", junk)
		assert.Contains(t, fmt.Sprint(err), "does not hold a number", "fence %q", junk)
		assert.Zero(t, admin.Exists(ctx, "{redlock:junk}").Val(), "fence %q: lock key set", junk)
	}
}

// TestReadOnlyReplicaSaysSo: a server's refusal reaches the caller as the
// server's error, not as a timeout hidden by go-redis's retries.
func TestReadOnlyReplicaSaysSo(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	host, port, _ := strings.Cut(master.Addr(), ":")
	replica := redistest.Start(t, "--replicaof", host, port)
	// A 3s TTL: the default node timeout (300ms) outlasts go-redis's own
	// retries of READONLY (3 retries, 8-136ms of backoff).
	cl := redis.NewClient(&redis.Options{Addr: replica.Addr()}) // go-redis's default retries
	t.Cleanup(func() { cl.Close() })
	lk := newLocker(t, cl, WithTTL(3*time.Second))
	ctx := context.Background()
	for range 5 {
		_, err := lk.TryLock(ctx, "ro")
		require.ErrorIs(t, err, ErrNotObtained)
		assert.True(t, redis.IsReadOnlyError(err), "TryLock() on a replica = %v, want READONLY", err)
		assert.NotErrorIs(t, err, node.ErrTimeout)
	}
	// The text says what READONLY means, without the script's SHA and
	// line; the server's own text ends the chain.
	_, err := lk.TryLock(ctx, "ro")
	assert.Contains(t, err.Error(), "node 0 (", "TryLock() on a replica = %v", err)
	assert.Contains(t, err.Error(), ") is a replica (READONLY)", "TryLock() on a replica = %v", err)
	assert.NotContains(t, err.Error(), "user_script", "TryLock() on a replica = %v", err)
	var ne *NodeError
	require.ErrorAs(t, err, &ne)
	var re redis.Error
	require.ErrorAs(t, ne, &re)
	assert.True(t, strings.HasPrefix(re.Error(), "READONLY "), "the server's text at the end of the chain = %q", re.Error())
	// A plain client cannot follow a failover: READONLY is for good, and
	// Lock says so at once instead of waiting for its ctx.
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err = lk.Lock(lctx, "ro")
	require.ErrorIs(t, err, ErrNotObtained)
	assert.NoError(t, lctx.Err(), "Lock() waited for its ctx")
	assert.True(t, redis.IsReadOnlyError(err), "Lock() on a replica = %v, want READONLY in it", err)
}
