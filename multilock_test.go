package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/internal/scripts"
)

// TestLockAllOppositeOrders: 8 goroutines over two Lockers take
// overlapping sets of names, each in an order of its own. None deadlocks,
// and no name ever has two holders.
func TestLockAllOppositeOrders(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lks := twoLockers(t, srv)
	ctx := context.Background()
	names := []string{"ma", "mb", "mc", "md"}
	var (
		inside [4]atomic.Int32
		bad    atomic.Int32
		stale  atomic.Int32
		wg     sync.WaitGroup
		last   [4]atomic.Int64 // per name: the token of its last holder
	)
	for i := range 8 {
		lk := lks[i%2]
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 7))
			for range 12 {
				pick := r.Perm(4)[:2+r.IntN(3)] // 2 to 4 names, in a random order
				want := make([]string, len(pick))
				for j, p := range pick {
					want[j] = names[p]
				}
				cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				l, err := lk.LockAll(cctx, want)
				cancel()
				if !assert.NoError(t, err, "LockAll(%v)", want) {
					return
				}
				assert.ElementsMatch(t, want, l.Names())
				for _, p := range pick {
					if inside[p].Add(1) != 1 {
						bad.Add(1)
					}
				}
				for _, p := range pick {
					// Held: no other holder of name p writes last[p] now.
					if l.Token() <= last[p].Load() {
						stale.Add(1)
					}
					last[p].Store(l.Token())
				}
				time.Sleep(time.Millisecond) // work inside, not synchronisation
				for _, p := range pick {
					inside[p].Add(-1)
				}
				assert.NoError(t, l.Unlock(ctx))
			}
		})
	}
	wg.Wait()
	assert.Zero(t, bad.Load(), "two holders of a name at once")
	assert.Zero(t, stale.Load(), "a name's token did not increase")
}

// TestLockAllAllOrNothing: with one name held, TryLockAll takes none of the
// others, and its TakenError names the held one. A LockAll that waits gets
// all of them when that name is released (by the release message: the
// retry policy alone would sleep for the whole lease).
func TestLockAllAllOrNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lks := twoLockers(t, srv, WithRetry(hourRetry))
	ctx := context.Background()
	held, err := lks[0].TryLock(ctx, "all-b")
	require.NoError(t, err)
	_, err = lks[1].TryLockAll(ctx, []string{"all-c", "all-b", "all-a"})
	var te *TakenError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, "all-b", te.Name)
	assert.Equal(t, held.Owner(), te.Owner)
	for _, name := range []string{"all-a", "all-c"} {
		h, err := lks[1].Inspect(ctx, name)
		require.NoError(t, err)
		assert.False(t, h.Held, "%s was taken by a refused TryLockAll", name)
	}

	got := make(chan *Lock, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := lks[1].LockAll(wctx, []string{"all-c", "all-b", "all-a", "all-b"})
		assert.NoError(t, err)
		got <- l
	}()
	waitSubscribers(t, srv, "{redlock:all-b}:rel", 1)
	require.True(t, eventually(5*time.Second, func() bool {
		return lks[1].c.Waits.Busy(engine.QueueKey("{redlock:all-b}:rel", engine.QueueMulti))
	}))
	require.NoError(t, held.Unlock(ctx))
	l := <-got
	require.NotNil(t, l)
	assert.Equal(t, []string{"all-a", "all-b", "all-c"}, l.Names())
	assert.Equal(t, "all-a,all-b,all-c", l.Name())
	assert.Greater(t, l.Token(), held.Token(), "one token above every name's last")
	for _, name := range []string{"all-a", "all-b", "all-c"} {
		h, err := lks[0].Inspect(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, l.Owner(), h.Owner)
		assert.Equal(t, l.Token(), h.Token, "%s's counter raised to the lock's token", name)
	}
	d, err := l.TTL(ctx)
	require.NoError(t, err)
	assert.Positive(t, d)
	require.NoError(t, l.Extend(ctx, 20*time.Second))
	require.NoError(t, l.Unlock(ctx))
	for _, name := range []string{"all-a", "all-b", "all-c"} {
		h, err := lks[0].Inspect(ctx, name)
		require.NoError(t, err)
		assert.False(t, h.Held)
	}
	require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)

	_, err = lks[0].TryLockAll(ctx, nil)
	assert.Error(t, err)
	_, err = lks[0].TryLockAll(ctx, []string{"x", ""})
	assert.Error(t, err)
}

// TestLockAllLost: one of the names taken away (its key deleted by hand,
// as a failover would) makes the whole lock lost at the next renewal (a
// paused server: TestLossWhenPausedEveryKind).
func TestLockAllLost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t), WithTTL(600*time.Millisecond), WithNodeTimeout(100*time.Millisecond))
	ctx := context.Background()
	l, err := lk.TryLockAll(ctx, []string{"lost-a", "lost-b"})
	require.NoError(t, err)
	srv.Do(t, "DEL", "{redlock:lost-b}")
	waitDone(t, l, 3*time.Second)
	requireLoss(t, l.Err(), LossDeleted)
}

// TestLockAllCrashedHolder: a multi-name lock nobody renews frees every
// name when its lease ends.
func TestLockAllCrashedHolder(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lks := twoLockers(t, srv)
	ctx := context.Background()
	_, err := lks[0].TryLockAll(ctx, []string{"crash-a", "crash-b"}, WithTTL(300*time.Millisecond), WithAutoRenew(false))
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := lks[1].LockAll(wctx, []string{"crash-b", "crash-a"})
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
}

// TestLockAllClusterRaisedCounterLife: a multi-name lock over several
// Cluster slots takes the largest of its names' tokens and raises the
// other counters to it; with a retention of its own (1h), the counter that
// minted the token keeps that retention and the raised ones keep at least
// the default, as WithFenceRetention says.
func TestLockAllClusterRaisedCounterLife(t *testing.T) {
	t.Parallel()
	cc := startCluster(t)
	lk := newLocker(t, cc, WithFenceRetention(time.Hour), WithAutoRenew(false))
	ctx := context.Background()
	names := []string{"rl-a", "rl-b", "rl-c"}
	requireSlotsSpanned(t, cc, names)
	fence := func(n string) string { return engine.LockKey("redlock:", n) + ":fence" }
	ahead := time.Now().Add(time.Hour).UnixMicro()
	require.NoError(t, cc.Set(ctx, fence("rl-b"), ahead, 30*time.Minute).Err())
	l, err := lk.TryLockAll(ctx, names)
	require.NoError(t, err)
	assert.Equal(t, ahead+1, l.Token(), "the token: the counter ahead plus one")
	for _, n := range names {
		assert.Equal(t, fmt.Sprint(ahead+1), cc.Get(ctx, fence(n)).Val(), "%s's counter at the token", n)
		life := scripts.DefaultFenceRetention
		if n == "rl-b" {
			life = time.Hour // minted it: the lock's retention
		}
		assert.InDelta(t, float64(life), float64(cc.PTTL(ctx, fence(n)).Val()), float64(time.Minute), "%s's counter's life", n)
	}
	require.NoError(t, l.Unlock(ctx))
}

// TestLockAllCluster: on a Cluster client the names live in different
// slots: they are taken one at a time in order, released on refusal, and
// renewed, extended and released per name, never in one CROSSSLOT script.
func TestLockAllCluster(t *testing.T) {
	t.Parallel()
	cc := startCluster(t)
	lk := newLocker(t, cc, WithTTL(time.Second))
	other := newLocker(t, cc)
	ctx := context.Background()
	names := []string{"cl-a", "cl-b", "cl-c", "cl-d"}
	requireSlotsSpanned(t, cc, names)

	held, err := other.TryLock(ctx, "cl-c")
	require.NoError(t, err)
	_, err = lk.TryLockAll(ctx, names)
	var te *TakenError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, "cl-c", te.Name)
	for _, n := range []string{"cl-a", "cl-b", "cl-d"} {
		_, err := cc.Get(ctx, engine.LockKey("redlock:", n)).Result()
		assert.ErrorIs(t, err, redis.Nil, "%s left behind by a refused attempt", n)
	}
	require.NoError(t, held.Unlock(ctx))

	l, err := lk.TryLockAll(ctx, names)
	require.NoError(t, err)
	for _, n := range names {
		h, err := lk.Inspect(ctx, n)
		require.NoError(t, err)
		assert.Equal(t, l.Owner(), h.Owner)
		assert.Equal(t, l.Token(), h.Token, "%s's counter at the lock's token", n)
	}
	first := l.Until()
	require.True(t, eventually(5*time.Second, func() bool { return l.Until().After(first.Add(500 * time.Millisecond)) }), "renewed")
	require.NoError(t, l.Err())
	require.NoError(t, l.Extend(ctx, 3*time.Second))
	d, err := l.TTL(ctx)
	require.NoError(t, err)
	assert.Greater(t, d, time.Second)
	require.NoError(t, l.Unlock(ctx))
	for _, n := range names {
		_, err := cc.Get(ctx, engine.LockKey("redlock:", n)).Result()
		assert.ErrorIs(t, err, redis.Nil)
	}
	_, err = lk.TryLockAll(ctx, names, WithReplicaAcks(1, time.Second))
	assert.Error(t, err, "replica acks across shards")
}

// requireSlotsSpanned checks that the lock keys of names live in more
// than one Cluster slot: a multi-name lock over them spans shards.
func requireSlotsSpanned(t *testing.T, cc *redis.ClusterClient, names []string) {
	t.Helper()
	slots := map[int64]bool{}
	for _, n := range names {
		s, err := cc.ClusterKeySlot(context.Background(), engine.LockKey("redlock:", n)).Result()
		require.NoError(t, err)
		slots[s] = true
	}
	require.Greater(t, len(slots), 1, "the names must span slots")
}
