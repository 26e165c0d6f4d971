package redlock

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/redistest"
)

// TestWaitCrashedHolder: the holder dies without releasing, so no message
// comes; the waiter acquires when the lease runs out, not a backoff step later.
func TestWaitCrashedHolder(t *testing.T) {
	srv := redistest.Start(t)
	cl := srv.Client(t)
	lk := newLocker(t, cl)
	ctx := context.Background()
	const lease = 500 * time.Millisecond
	if err := cl.Set(ctx, "{redlock:crashed}", "dead-process", lease).Err(); err != nil {
		t.Fatalf("SET = %v", err)
	}
	setAt := time.Now()
	l, err := lk.Lock(ctx, "crashed")
	if err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	after := time.Since(setAt)
	// The next backoff step would come ~500ms after the lease; a loaded
	// machine adds scheduling delay (128ms seen under busy-test).
	if after < lease-5*time.Millisecond || after > lease+250*time.Millisecond {
		t.Errorf("acquired %v after the dead holder's SET, want ~%v (+ scheduling delay, well before a backoff step)", after, lease)
	}
	t.Logf("acquired %v after the crashed holder's %v lease began", after, lease)
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}

// TestLockEndsWhenNotContention: a Lock under a ctx without deadline ends
// on its own when the trouble is not contention, with an error that names
// the cause: at once for what no retry fixes (a replica behind a plain
// client, a port that is not Redis, a wrong password), after
// WithUnansweredLimit for a server that does not answer (the attempts are
// logged at WARN meanwhile). Contention never counts toward that limit.
func TestLockEndsWhenNotContention(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	host, port, _ := strings.Cut(master.Addr(), ":")
	replica := redistest.Start(t, "--replicaof", host, port)
	master.ACLUser(t, "app", "right", "~*", "&*", "+@all")
	// The limit: short where the test waits for it (a server that does not
	// answer), long where the test checks that the call did not wait for it.
	// A refusal ends after go-redis's own retries of it, twice (the acquire
	// and the cleanup it sends to the node): some 150ms idle, and up to 1.2s
	// seen with -race on a busy 2-core machine, too near a 1s limit to tell
	// the two apart.
	const (
		limit        = time.Second
		refusalLimit = 10 * time.Second
	)
	for _, tc := range []struct {
		name        string
		client      func() *redis.Client
		unreachable bool
		cause       func(error) bool
	}{
		{"unreachable port", func() *redis.Client { return redis.NewClient(&redis.Options{Addr: closedAddr(t)}) }, true,
			func(err error) bool {
				var ne net.Error
				return errors.As(err, &ne) || strings.Contains(err.Error(), "connection refused")
			}},
		{"replica", func() *redis.Client { return redis.NewClient(&redis.Options{Addr: replica.Addr()}) }, false, redis.IsReadOnlyError},
		{"not Redis", func() *redis.Client { return redis.NewClient(&redis.Options{Addr: httpAddr(t)}) }, false,
			func(err error) bool { return strings.Contains(err.Error(), "can't parse") }},
		{"wrong password", func() *redis.Client {
			return redis.NewClient(&redis.Options{Addr: master.Addr(), Username: "app", Password: "wrong"})
		}, false, redis.IsAuthError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := tc.client()
			t.Cleanup(func() { cl.Close() })
			logs := &logRecords{}
			lim := refusalLimit
			if tc.unreachable {
				lim = limit
			}
			opts := []Option{WithUnansweredLimit(lim), WithTTL(time.Second), WithLogger(slog.New(logs))}
			if tc.name == "replica" {
				// go-redis retries READONLY, each time on a new dial (it drops a
				// connection that said READONLY): the node timeout must outlast
				// that (DESIGN.md "Calls to Redis"), which 100ms (the TTL's) did
				// not with 50ms dials; every attempt then timed out.
				opts = append(opts, WithNodeTimeout(time.Second))
			}
			lk := newLocker(t, cl, opts...)
			got := make(chan error, 1)
			start := time.Now()
			go func() { _, err := lk.Lock(context.Background(), "x"); got <- err }()
			var err error
			select {
			case err = <-got:
			case <-time.After(30 * time.Second):
				t.Fatal("Lock under a Background ctx did not return")
			}
			elapsed := time.Since(start)
			t.Logf("after %v: %v", elapsed, err)
			require.ErrorIs(t, err, ErrNotObtained)
			assert.True(t, tc.cause(err), "the error does not name the cause: %v", err)
			requireOneLine(t, err)
			if tc.unreachable {
				require.ErrorIs(t, err, ErrUnreachable)
				assert.GreaterOrEqual(t, elapsed, limit)
				// d plus one attempt, and one diagnosing call when the
				// cause was not known (at most 2s); loose for a busy machine.
				assert.Less(t, elapsed, limit+4*time.Second)
				assert.True(t, logs.logged(slog.LevelWarn, "no answer from Redis"), "no WARN line for the unanswered attempts")
			} else {
				assert.NotErrorIs(t, err, ErrUnreachable)
				assert.Less(t, elapsed, refusalLimit, "a permanent refusal waited for the limit")
			}
		})
	}

	t.Run("contention is not unanswered", func(t *testing.T) {
		held, err := newLocker(t, master.Client(t)).TryLock(context.Background(), "busy")
		require.NoError(t, err)
		lk := newLocker(t, master.Client(t), WithUnansweredLimit(50*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err = lk.Lock(ctx, "busy")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, ErrUnreachable)
		require.NoError(t, held.Unlock(context.Background()))
	})
}

// TestUnansweredLimitDefault: the documented default, and 0 turning it off.
func TestUnansweredLimitDefault(t *testing.T) {
	t.Parallel()
	assert.Equal(t, 10*time.Second, engine.DefaultConfig().Unanswered)
	cfg, err := engine.WithOptions(engine.DefaultConfig(), []Option{WithUnansweredLimit(0)})
	require.NoError(t, err)
	assert.Zero(t, cfg.Unanswered)
	_, err = engine.WithOptions(engine.DefaultConfig(), []Option{WithUnansweredLimit(-time.Second)})
	assert.ErrorContains(t, err, "unanswered limit")
}
