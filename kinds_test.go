package redlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/internal/scripts"
)

// deleteKeys deletes every key of cl matching pattern, as if all had
// expired; it returns how many there were.
func deleteKeys(t *testing.T, cl *redis.Client, pattern string) int {
	t.Helper()
	ctx := context.Background()
	var keys []string
	it := cl.Scan(ctx, 0, pattern, 1000).Iterator()
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	require.NoError(t, it.Err())
	if len(keys) > 0 {
		require.NoError(t, cl.Del(ctx, keys...).Err())
	}
	return len(keys)
}

// TestTokensIncreaseAcrossExpiredCounters: with every key of a name gone
// between two acquisitions (the fence counter expired, and everything else
// with it), the next token is still larger: it is floored by a clock in µs,
// the server's for a Locker, the client's for a Redlock. 50 rounds each.
func TestTokensIncreaseAcrossExpiredCounters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const rounds = 50
	// round takes and releases the name once; when it returns, no call of
	// it is still on its way to a server.
	check := func(t *testing.T, round func() int64, servers []*redis.Client) {
		var last int64
		for i := range rounds {
			token := round()
			require.Greater(t, token, last, "round %d: token after every key of the name was deleted", i)
			last = token
			for j, cl := range servers {
				require.Positive(t, deleteKeys(t, cl, "{redlock:gone}*"), "round %d, server %d: nothing to delete", i, j)
			}
		}
	}
	t.Run("Locker", func(t *testing.T) {
		srv := redistest.Start(t)
		lk := newLocker(t, srv.Client(t))
		check(t, func() int64 {
			l, err := lk.TryLock(ctx, "gone")
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))
			return l.Token()
		}, []*redis.Client{srv.Client(t)})
	})
	t.Run("Redlock", func(t *testing.T) {
		srvs := redistest.StartN(t, 3)
		var clients []Client
		var admins []*redis.Client
		for _, s := range srvs {
			clients = append(clients, s.Client(t))
			admins = append(admins, s.Client(t))
		}
		check(t, func() int64 {
			// A Redlock settles at a quorum; its Close waits for the calls
			// to the last master, so that the keys are deleted after them.
			r, err := NewRedlock(clients)
			require.NoError(t, err)
			defer func() { require.NoError(t, r.Close()) }()
			l, err := r.TryLock(ctx, "gone")
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))
			return l.Token()
		}, admins)
	})
}

// TestEveryKeyExpires: after 2,000 names were locked and released, some
// also read-held, as semaphores, in LockAll locks, with metadata, or
// contended by a waiting writer of another Locker, and with some holds
// left held, every key left on the server has an expiry. Fence counters
// carry the retention: the default, or WithFenceRetention's.
func TestEveryKeyExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	a := newLocker(t, srv.Client(t), WithTTL(time.Minute))
	b := newLocker(t, srv.Client(t), WithTTL(time.Minute), WithFenceRetention(time.Hour))
	const names = 2000
	var held []*Lock
	for i := range names {
		name := "n" + strconv.Itoa(i)
		var l *Lock
		var err error
		switch i % 10 {
		case 1:
			l, err = a.TryRLock(ctx, name)
		case 2:
			var s *Semaphore
			if s, err = a.Semaphore(name, 2); err == nil {
				l, err = s.TryAcquire(ctx)
			}
		case 3:
			l, err = a.TryLockAll(ctx, []string{name, name + "x"})
		case 4:
			l, err = a.TryLock(ctx, name, WithMetadata("m"+name))
		case 5:
			l, err = b.TryLock(ctx, name)
		default:
			l, err = a.TryLock(ctx, name)
		}
		require.NoError(t, err, "name %s", name)
		if i%97 == 0 { // of every kind, since 97 and 10 are coprime
			held = append(held, l) // left held: its keys expire with it
			continue
		}
		require.NoError(t, l.Unlock(ctx), "name %s", name)
	}
	// Waiting writers of another Locker: their queue and alive keys.
	for i := range 5 {
		name := "w" + strconv.Itoa(i)
		l, err := a.TryLock(ctx, name)
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			w, err := b.Lock(ctx, name)
			if err == nil {
				err = w.Unlock(ctx)
			}
			got <- err
		}()
		writersQueued(t, srv, name, 1)
		require.NoError(t, l.Unlock(ctx))
		require.NoError(t, <-got)
	}

	// And one still waiting while the keys are read.
	l, err := a.TryLock(ctx, "wq")
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		w, err := b.Lock(ctx, "wq")
		if err == nil {
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	writersQueued(t, srv, "wq", 1)
	defer func() {
		require.NoError(t, l.Unlock(ctx))
		require.NoError(t, <-got)
	}()

	var keys []string
	it := admin.Scan(ctx, 0, "*", 1000).Iterator()
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	require.NoError(t, it.Err())
	require.Greater(t, len(keys), names, "keys left on the server")
	pipe := admin.Pipeline()
	ttls := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		ttls[i] = pipe.PTTL(ctx, k)
	}
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)
	kinds := map[string]int{}
	for i, k := range keys {
		d := ttls[i].Val()
		require.NotEqual(t, time.Duration(-1), d, "key %s has no expiry", k)
		switch {
		case k == "{redlock:n5}:fence" || k == "{redlock:n15}:fence":
			assert.InDelta(t, float64(time.Hour), float64(d), float64(time.Minute), "PTTL of %s (WithFenceRetention(1h))", k)
		case k == "{redlock:n0}:fence":
			assert.InDelta(t, float64(scripts.DefaultFenceRetention), float64(d), float64(time.Minute), "PTTL of %s (default retention)", k)
		}
		kinds[keyKind(k)]++
	}
	t.Logf("%d keys, all with an expiry: %v", len(keys), kinds)
	for _, l := range held {
		require.NoError(t, l.Unlock(ctx))
	}
}

// keyKind is the suffix of a key after its hash tag, ids cut, for the
// test's log.
func keyKind(k string) string {
	_, s, _ := strings.Cut(k, "}")
	for _, per := range []string{":released:", ":writers:"} {
		if i := strings.Index(s, per); i >= 0 {
			return s[:i+len(per)] + "<id>"
		}
	}
	if s == "" {
		return "lock"
	}
	return s
}

// TestFenceCounterLife: a grant keeps the counter for the retention, or for
// its lease when longer, and never shortens it; renewals keep it as long as
// the lease; a counter written without expiry (by an older version) gets
// one at the next grant; raise.lua's write-back keeps the default retention
// or the one it is given.
func TestFenceCounterLife(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	pttl := func(k string) time.Duration { return admin.PTTL(ctx, k).Val() }

	short := newLocker(t, srv.Client(t), WithFenceRetention(time.Second), WithAutoRenew(false))
	l, err := short.TryLock(ctx, "life", WithTTL(5*time.Second))
	require.NoError(t, err)
	assert.Greater(t, pttl("{redlock:life}:fence"), 4*time.Second, "a counter outlives the lease it was minted for")
	require.NoError(t, l.Extend(ctx, time.Minute))
	assert.Greater(t, pttl("{redlock:life}:fence"), 50*time.Second, "an Extend keeps the counter as long as the lease")
	h, err := short.Inspect(ctx, "life")
	require.NoError(t, err)
	assert.Equal(t, l.Token(), h.Token, "Inspect().Token")
	require.NoError(t, l.Unlock(ctx))
	l, err = newLocker(t, srv.Client(t)).TryLock(ctx, "life")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	assert.Greater(t, pttl("{redlock:life}:fence"), scripts.DefaultFenceRetention-time.Minute, "default retention")
	l, err = short.TryLock(ctx, "life", WithTTL(time.Second))
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	assert.Greater(t, pttl("{redlock:life}:fence"), scripts.DefaultFenceRetention-time.Minute, "a grant shortened the counter's life")

	require.NoError(t, admin.Set(ctx, "{redlock:old}:fence", "5", 0).Err())
	l, err = newLocker(t, srv.Client(t)).TryLock(ctx, "old")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	assert.Greater(t, pttl("{redlock:old}:fence"), scripts.DefaultFenceRetention-time.Minute, "a counter left without expiry")

	require.NoError(t, scripts.Raise.Run(ctx, admin, []string{"{redlock:raised}:fence"}, "7").Err())
	assert.Greater(t, pttl("{redlock:raised}:fence"), scripts.DefaultFenceRetention-time.Minute, "raise.lua, default")
	require.NoError(t, scripts.Raise.Run(ctx, admin, []string{"{redlock:raised2}:fence"}, "7", fmt.Sprint(time.Hour.Milliseconds())).Err())
	assert.InDelta(t, float64(time.Hour), float64(pttl("{redlock:raised2}:fence")), float64(time.Minute), "raise.lua with a retention")
}
