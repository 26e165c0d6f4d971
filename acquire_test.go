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

	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/internal/scripts"
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

// TestAcquireMintForms: acquire.lua mints a token on its common path
// written out (no function) and through mint in _lib.lua otherwise; both
// must leave the same counter. For each form of its fencing argument (the
// floor alone, which the library sends for the default retention; "1:floor"
// and "<ms>:floor") and each state the counter can be in, the reply, the
// counter's value and its remaining life are those mint gives: the larger
// of the counter plus one and the floor, a life of the retention (or of a
// longer lease) that a grant never shortens, and a counter that is not a
// number or is exhausted left as it was, with the lock not taken.
func TestAcquireMintForms(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	ctx := context.Background()
	day, hour := scripts.DefaultFenceRetention, time.Hour
	floor := time.Now().UnixMicro()
	fs := strconv.FormatInt(floor, 10)
	forms := []struct {
		name, arg string
		life      time.Duration // the retention the form asks for
	}{
		{"floor alone", fs, day},
		{"default:floor", "1:" + fs, day},
		{"retention:floor", strconv.FormatInt(hour.Milliseconds(), 10) + ":" + fs, hour},
	}
	type counter struct {
		value string
		life  time.Duration // 0: no expiry
	}
	cases := []struct {
		name   string
		before *counter // nil: no counter
		lease  time.Duration
		want   any                              // the reply
		after  func(life time.Duration) counter // the counter afterwards
	}{
		{"no counter", nil, 10 * time.Second, floor,
			func(life time.Duration) counter { return counter{fs, life} }},
		{"below the floor", &counter{strconv.FormatInt(floor-1_000_000, 10), 30 * time.Minute}, 10 * time.Second, floor,
			func(life time.Duration) counter { return counter{fs, life} }},
		{"below the floor, a longer life", &counter{strconv.FormatInt(floor-1_000_000, 10), 48 * time.Hour}, 10 * time.Second, floor,
			func(time.Duration) counter { return counter{fs, 48 * time.Hour} }},
		{"below the floor, no expiry", &counter{"5", 0}, 10 * time.Second, floor,
			func(life time.Duration) counter { return counter{fs, life} }},
		{"a lease beyond the retention", nil, 25 * time.Hour, floor,
			func(time.Duration) counter { return counter{fs, 25 * time.Hour} }},
		{"ahead of the floor", &counter{strconv.FormatInt(floor+5, 10), 30 * time.Minute}, 10 * time.Second, floor + 6,
			func(life time.Duration) counter { return counter{strconv.FormatInt(floor+6, 10), life} }},
		{"not a number", &counter{"nan", 30 * time.Minute}, 10 * time.Second, []any{int64(scripts.ReplyBadFence), int64(0)},
			func(time.Duration) counter { return counter{"nan", 30 * time.Minute} }},
		{"minus infinity", &counter{"-inf", 30 * time.Minute}, 10 * time.Second, []any{int64(scripts.ReplyBadFence), int64(0)},
			func(time.Duration) counter { return counter{"-inf", 30 * time.Minute} }},
		{"exhausted", &counter{"9007199254740991", 30 * time.Minute}, 10 * time.Second, []any{int64(scripts.ReplyExhausted), int64(9007199254740991)},
			func(time.Duration) counter { return counter{"9007199254740991", 30 * time.Minute} }},
	}
	for _, form := range forms {
		for i, tc := range cases {
			name := fmt.Sprintf("%s/%s", form.name, tc.name)
			lock := fmt.Sprintf("{mint%d:%d}", len(form.name), i)
			fence := lock + ":fence"
			if tc.before != nil {
				require.NoError(t, cl.Set(ctx, fence, tc.before.value, tc.before.life).Err(), name)
			}
			got, err := scripts.Acquire.Run(ctx, cl, []string{lock, fence}, "me", tc.lease.Milliseconds(), form.arg).Result()
			require.NoError(t, err, name)
			assert.Equal(t, tc.want, got, "%s: reply", name)
			_, granted := tc.want.(int64)
			assert.Equal(t, granted, cl.Get(ctx, lock).Val() == "me", "%s: lock taken", name)
			want := tc.after(form.life)
			assert.Equal(t, want.value, cl.Get(ctx, fence).Val(), "%s: counter", name)
			pttl := cl.PTTL(ctx, fence).Val()
			if want.life == 0 {
				assert.Equal(t, time.Duration(-1), pttl, "%s: counter without expiry", name)
			} else {
				assert.InDelta(t, float64(want.life), float64(pttl), float64(time.Minute), "%s: counter's life", name)
			}
		}
	}
	got, err := scripts.Acquire.Run(ctx, cl, []string{"{mint-off}", "{mint-off}:fence"}, "me", 10000, "0").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(0), got, "fencing off: token 0")
	assert.Zero(t, cl.Exists(ctx, "{mint-off}:fence").Val(), "fencing off: no counter")
}

// TestFenceLifeLaggingFloor: a grant whose floor was taken well before the
// server ran it (the client's goroutine or the server was descheduled in
// between, as on a loaded machine), followed by a release and a new grant
// in the same millisecond of the server's clock: PEXPIRE GT refuses the
// second grant's expiry, equal to the first's, and that must not cost the
// check for a counter without expiry (PTTL), although the floors are more
// than 10 ms apart. Both mints are run: acquire.lua's common path written
// out, and mint in _lib.lua (a waiting writer claiming the name reserved
// for it). Each round runs in one MULTI, so its scripts almost always share
// a millisecond.
func TestFenceLifeLaggingFloor(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	ctx := context.Background()
	for _, s := range []*redis.Script{scripts.Acquire, scripts.Release} {
		require.NoError(t, s.Load(ctx, cl).Err())
	}
	const rounds = 20
	for _, path := range []string{"written out", "mint"} {
		srv.Do(t, "CONFIG", "RESETSTAT")
		for i := range rounds {
			lock := fmt.Sprintf("{lag:%s:%d}", path, i)
			keys := []string{lock, lock + ":fence", lock + ":queue", lock + ":waiting"}
			now := time.Now()
			lagging := strconv.FormatInt(now.Add(-50*time.Millisecond).UnixMicro(), 10)
			floor := strconv.FormatInt(now.UnixMicro(), 10)
			cmds, err := cl.TxPipelined(ctx, func(p redis.Pipeliner) error {
				scripts.Acquire.Run(ctx, p, keys[:2], "a", 10000, lagging)
				scripts.Release.Run(ctx, p, []string{lock, lock + ":released", keys[2], keys[3]}, "a", 10000)
				if path == "written out" {
					scripts.Acquire.Run(ctx, p, keys[:2], "b", 10000, floor)
				} else {
					p.Set(ctx, lock, "queued:w", 10*time.Second)
					scripts.Acquire.Run(ctx, p, keys, "b", 10000, floor, "w")
				}
				return nil
			})
			require.NoError(t, err, "%s, round %d", path, i)
			assert.Equal(t, floor, fmt.Sprint(cmds[len(cmds)-1].(*redis.Cmd).Val()), "%s, round %d: the second grant's token", path, i)
		}
		assert.Zero(t, allCalls(t, srv)["pttl"], "%s: PTTL calls in %d rounds", path, rounds)
		for i := range rounds {
			fence := fmt.Sprintf("{lag:%s:%d}:fence", path, i)
			assert.Greater(t, cl.PTTL(ctx, fence).Val(), scripts.DefaultFenceRetention-time.Minute, "%s, round %d: the counter's life", path, i)
		}
	}
}

// TestReadOnlyReplicaSaysSo: a server's refusal reaches the caller as the
// server's error, not as a timeout hidden by go-redis's retries.
func TestReadOnlyReplicaSaysSo(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	host, port, _ := strings.Cut(master.Addr(), ":")
	replica := redistest.Start(t, "--replicaof", host, port)
	// A 10s TTL: the default node timeout (1s) outlasts go-redis's own
	// retries of READONLY (3 retries, 8-136ms of backoff), as DESIGN.md
	// "Calls to Redis" asks; each retry dials anew (go-redis drops a
	// connection that said READONLY), and 300ms did not cover four 50ms dials.
	cl := redis.NewClient(&redis.Options{Addr: replica.Addr()}) // go-redis's default retries
	t.Cleanup(func() { cl.Close() })
	lk := newLocker(t, cl, WithTTL(10*time.Second))
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
