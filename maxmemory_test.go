package redlock

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/redistest"
)

// fillMemory writes a 1 MiB value to srv, then sets noeviction and
// maxmemory to what the server used before it plus 512 KiB: from then on
// it refuses every write that may grow memory, which the test checks, also
// once the server has freed the 1 MiB query buffer of that write. unfill
// deletes the value, which brings the server below the limit, and lifts
// the limit.
func fillMemory(t *testing.T, srv *redistest.Server) (unfill func()) {
	t.Helper()
	ctx := context.Background()
	admin := srv.Client(t)
	info := admin.Info(ctx, "memory").Val()
	_, rest, ok := strings.Cut(info, "\nused_memory:")
	require.True(t, ok, "INFO memory without used_memory: %q", info)
	used, err := strconv.ParseInt(strings.TrimSpace(rest[:strings.IndexByte(rest, '\n')]), 10, 64)
	require.NoError(t, err)
	require.NoError(t, admin.Set(ctx, "filler", strings.Repeat("x", 1<<20), 0).Err())
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+512<<10, 10)).Err())
	err = admin.Set(ctx, "probe", "x", 0).Err()
	require.True(t, redis.IsOOMError(err), "SET on the filled server = %v, want the OOM refusal", err)
	return func() {
		t.Helper()
		require.NoError(t, admin.Del(ctx, "filler").Err())
		require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "0").Err())
	}
}

// TestReleaseAtMaxmemory: on a server full to maxmemory (noeviction), every
// kind of hold is released at once (Unlock returns nil and the name's keys
// are gone), and another Locker takes the name as soon as memory is free,
// not when the one-minute lease would have ended. The released marker is
// written too (Redis lets a script finish once it has written), so a
// retried Unlock still knows it succeeded.
func TestReleaseAtMaxmemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	opts := []Option{WithTTL(time.Minute), WithAutoRenew(false)}
	for _, tc := range []struct {
		name    string
		acquire func(lk *Locker) (*Lock, error)
		gone    []string // keys that must not hold the released owner
	}{
		{"Lock", func(lk *Locker) (*Lock, error) { return lk.TryLock(ctx, "oom", opts...) }, []string{"{redlock:oom}"}},
		{"RLock", func(lk *Locker) (*Lock, error) { return lk.TryRLock(ctx, "oom", opts...) }, []string{"{redlock:oom}:readers"}},
		{"Semaphore", func(lk *Locker) (*Lock, error) {
			s, err := lk.Semaphore("oom", 1)
			if err != nil {
				return nil, err
			}
			return s.TryAcquire(ctx, opts...)
		}, []string{"{redlock:oom}:sem"}},
		{"LockAll", func(lk *Locker) (*Lock, error) { return lk.TryLockAll(ctx, []string{"oom", "oom2"}, opts...) },
			[]string{"{redlock:oom}", "{redlock:oom2}"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			a, b := newLocker(t, srv.Client(t)), newLocker(t, srv.Client(t))
			l, err := tc.acquire(a)
			require.NoError(t, err)
			unfill := fillMemory(t, srv)
			require.NoError(t, l.Unlock(ctx), "Unlock() on the full server")
			for _, k := range tc.gone {
				assert.Zero(t, admin.Exists(ctx, k).Val(), "%s still exists after Unlock: the name stays blocked", k)
			}
			assert.Equal(t, int64(1), admin.Exists(ctx, releasedMarkers(l)...).Val(), "released marker of %v", releasedMarkers(l))
			assert.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)

			unfill()
			l2, err := tc.acquire(b)
			require.NoError(t, err, "acquire by another Locker once memory is free")
			require.NoError(t, l2.Unlock(ctx))
		})
	}
}

// releasedMarkers are the released markers l's release writes, one of
// which the test expects.
func releasedMarkers(pub *Lock) []string {
	l := pub.ref()
	switch l.Kind {
	case engine.KindRead, engine.KindPermit:
		return l.Keys[1:2]
	case engine.KindMulti:
		return l.Multi.Rel[0][len(l.Multi.Names):][:1]
	}
	return engine.ReleaseKeys(l)[1:2]
}

// TestHandOffAtMaxmemory: an Unlock with a waiter of the same Locker on a
// full server grants nothing by hand-off (as an acquisition there would
// not) and releases instead: Unlock returns nil and the holder's key is
// gone; the waiter's own attempt meets the server's refusal. Another
// Locker takes the name once memory is free.
func TestHandOffAtMaxmemory(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	lk := newLocker(t, srv.Client(t), WithTTL(time.Minute), WithAutoRenew(false), WithRetry(ConstantRetry(time.Hour)))
	other := newLocker(t, srv.Client(t))
	holder, err := lk.TryLock(ctx, "oomh")
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		w, err := lk.Lock(wctx, "oomh")
		if err == nil {
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	waiting(t, lk.c, "oomh")
	unfill := fillMemory(t, srv)

	require.NoError(t, holder.Unlock(ctx), "Unlock() on the full server")
	assert.NotEqual(t, holder.Owner(), get(t, admin, "{redlock:oomh}"), "the holder's key outlived its Unlock")
	err = <-got
	assert.True(t, redis.IsOOMError(err), "the waiter's Lock() = %v, want the OOM refusal", err)

	unfill()
	// A reservation for a waiter, if one was made, lapses within 1s.
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	defer lcancel()
	l2, err := other.Lock(lctx, "oomh")
	require.NoError(t, err, "Lock by another Locker once memory is free")
	require.NoError(t, l2.Unlock(ctx))
}

// TestExtendAtMaxmemory: on a full server Extend moves the lease of every
// kind of hold (renewals run the same scripts): PEXPIRE and ZREM pass
// there, and a script's writes after them too.
func TestExtendAtMaxmemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	opts := []Option{WithTTL(5 * time.Second), WithAutoRenew(false)}
	for _, tc := range []struct {
		name    string
		acquire func(lk *Locker) (*Lock, error)
		key     string // its PTTL follows the lease
	}{
		{"Lock", func(lk *Locker) (*Lock, error) { return lk.TryLock(ctx, "oom", opts...) }, "{redlock:oom}"},
		{"Lock with metadata", func(lk *Locker) (*Lock, error) {
			return lk.TryLock(ctx, "oom", append(opts, WithMetadata("m"))...)
		}, "{redlock:oom}:meta"},
		{"RLock", func(lk *Locker) (*Lock, error) { return lk.TryRLock(ctx, "oom", opts...) }, "{redlock:oom}:readers"},
		{"Semaphore", func(lk *Locker) (*Lock, error) {
			s, err := lk.Semaphore("oom", 2)
			if err != nil {
				return nil, err
			}
			return s.TryAcquire(ctx, opts...)
		}, "{redlock:oom}:sem:permits"},
		{"LockAll", func(lk *Locker) (*Lock, error) { return lk.TryLockAll(ctx, []string{"oom", "oom2"}, opts...) }, "{redlock:oom2}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			l, err := tc.acquire(newLocker(t, srv.Client(t)))
			require.NoError(t, err)
			fillMemory(t, srv)
			require.NoError(t, l.Extend(ctx, time.Minute), "Extend() on the full server")
			assert.Greater(t, admin.PTTL(ctx, tc.key).Val(), 30*time.Second, "PTTL of %s", tc.key)
			assert.True(t, l.Until().After(time.Now().Add(30*time.Second)), "Until() = %v", l.Until())
			require.NoError(t, l.Unlock(ctx))
		})
	}
}

// TestRenewalAtMaxmemory: the watchdog keeps a read hold and a permit on a
// full server: neither is lost over three leases.
func TestRenewalAtMaxmemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ttl = time.Second
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t), WithTTL(ttl))
	r, err := lk.TryRLock(ctx, "oomr")
	require.NoError(t, err)
	s, err := lk.Semaphore("ooms", 1)
	require.NoError(t, err)
	p, err := s.TryAcquire(ctx)
	require.NoError(t, err)
	fillMemory(t, srv)
	// Not a synchronisation: the window in which an unrenewed lease ends.
	select {
	case <-r.Done():
		t.Fatalf("read hold lost on the full server: %v", r.Err())
	case <-p.Done():
		t.Fatalf("permit lost on the full server: %v", p.Err())
	case <-time.After(3 * ttl):
	}
	assert.NoError(t, r.Err())
	assert.NoError(t, p.Err())
	err = srv.Client(t).Set(ctx, "probe", "x", 0).Err()
	require.True(t, redis.IsOOMError(err), "SET after the window = %v, want the server still full", err)
	require.NoError(t, r.Unlock(ctx))
	require.NoError(t, p.Unlock(ctx))
}
