package redlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/internal/scripts"
)

// TestSemaphoreBound: 10 goroutines over two Lockers share 3 permits: never
// more than 3 inside, all of them inside at some point, tokens unique.
func TestSemaphoreBound(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lks := twoLockers(t, srv)
	ctx := context.Background()
	const permits, workers, iters = 3, 10, 8
	var (
		inside, most atomic.Int32
		wg           sync.WaitGroup
		mu           sync.Mutex
		tokens       = map[int64]bool{}
	)
	for i := range workers {
		s, err := lks[i%2].Semaphore("sem-bound", permits)
		require.NoError(t, err)
		wg.Go(func() {
			for range iters {
				cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				l, err := s.Acquire(cctx)
				cancel()
				if !assert.NoError(t, err) {
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				mu.Lock()
				assert.False(t, tokens[l.Token()], "token %d twice", l.Token())
				tokens[l.Token()] = true
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // work inside, not synchronisation
				inside.Add(-1)
				assert.NoError(t, l.Unlock(ctx))
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int32(permits), "holders at once")
	assert.Positive(t, most.Load())
	assert.Len(t, tokens, workers*iters)
}

// TestSemaphoreAllHeldAndWake: with every permit held, TryAcquire is
// refused with the first holder named, and a waiter is woken by the
// release message (its retry policy alone would sleep for the whole lease).
func TestSemaphoreAllHeldAndWake(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lks := twoLockers(t, srv, WithRetry(hourRetry), WithTTL(30*time.Second))
	ctx := context.Background()
	s0, err := lks[0].Semaphore("sem-wake", 2)
	require.NoError(t, err)
	s1, err := lks[1].Semaphore("sem-wake", 2)
	require.NoError(t, err)
	a, err := s0.TryAcquire(ctx)
	require.NoError(t, err)
	b, err := s0.TryAcquire(ctx)
	require.NoError(t, err)
	assert.Greater(t, b.Token(), a.Token())
	_, err = s1.TryAcquire(ctx)
	var te *TakenError
	require.ErrorAs(t, err, &te)
	assert.Contains(t, []string{a.Owner(), b.Owner()}, te.Owner, "a holder")
	assert.Equal(t, "sem-wake", te.Name)

	got := make(chan *Lock, 2)
	for range 2 {
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			l, err := s1.Acquire(wctx)
			assert.NoError(t, err)
			got <- l
		}()
	}
	// Both waiters of lks[1] wait; each release lets one in. A waiter is
	// queued before its SUBSCRIBE reaches the server: a release sent in
	// between would go unheard, and the waiter would sleep past its ctx
	// (on a busy machine that gap is long enough to hit). So wait for the
	// server to count the subscription too.
	channel := engine.ReleaseChannel("{redlock:sem-wake}" + scripts.SemSuffix)
	require.True(t, eventually(5*time.Second, func() bool {
		return lks[1].c.Waits.Busy(engine.QueueKey(channel, engine.QueuePermits))
	}))
	waitSubscribers(t, srv, channel, 1)
	require.NoError(t, a.Unlock(ctx))
	require.NoError(t, b.Unlock(ctx))
	for range 2 {
		l := <-got
		require.NotNil(t, l)
		require.NoError(t, l.Unlock(ctx))
	}
}

// TestSemaphoreCrashedHolder: a permit whose holder stopped renewing comes
// back when its lease ends, without anyone releasing it.
func TestSemaphoreCrashedHolder(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lks := twoLockers(t, srv)
	ctx := context.Background()
	s0, err := lks[0].Semaphore("sem-crash", 1)
	require.NoError(t, err)
	s1, err := lks[1].Semaphore("sem-crash", 1)
	require.NoError(t, err)
	crashed, err := s0.TryAcquire(ctx, WithTTL(300*time.Millisecond), WithAutoRenew(false))
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := s1.Acquire(wctx)
	require.NoError(t, err, "the crashed holder's permit came back")
	requireLoss(t, crashed.Err(), LossExpired)
	require.ErrorIs(t, crashed.Unlock(ctx), ErrNotHeld)
	require.NoError(t, l.Unlock(ctx))
}

// TestSemaphoreRenewAndInput: the watchdog keeps a permit past its TTL;
// bad input is an error.
func TestSemaphoreRenewAndInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t))
	ctx := context.Background()
	for _, p := range []int{0, -1, maxPermits + 1} {
		_, err := lk.Semaphore("sem-input", p)
		assert.Error(t, err, "permits %d", p)
	}
	_, err := lk.Semaphore("", 1)
	assert.Error(t, err)
	var nilLk *Locker
	_, err = nilLk.Semaphore("x", 1)
	assert.Error(t, err)
	var nilSem *Semaphore
	_, err = nilSem.TryAcquire(ctx)
	assert.Error(t, err)

	s, err := lk.Semaphore("sem-renew", 1)
	require.NoError(t, err)
	assert.Equal(t, 1, s.Permits())
	assert.Equal(t, "sem-renew", s.Name())
	// A 1s lease: a shorter one can be lost to a starved CPU under -race.
	l, err := s.TryAcquire(ctx, WithTTL(time.Second))
	require.NoError(t, err)
	first := l.Until()
	// Renewed past its first lease by the watchdog.
	require.True(t, eventually(5*time.Second, func() bool { return l.Until().After(first.Add(500 * time.Millisecond)) }), "renewed; Err() = %v", l.Err())
	require.NoError(t, l.Err())
	d, err := l.TTL(ctx)
	require.NoError(t, err)
	assert.Positive(t, d)
	_, err = s.TryAcquire(ctx)
	require.ErrorIs(t, err, ErrNotObtained)
	require.NoError(t, l.Unlock(ctx))
	l, err = s.TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
}

// TestSemaphorePermitsDiffer: two processes that disagree on a semaphore's
// permit count would each enforce their own bound. While live holders took
// their permits under one count, a Semaphore with another count is refused
// at once (waiting would not change the other process's configuration),
// also after the holders' leases were renewed past the first one; once the
// last permit is released, the next holder may choose a new count.
func TestSemaphorePermitsDiffer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lks := twoLockers(t, srv, WithRetry(hourRetry))
	ctx := context.Background()
	two, err := lks[0].Semaphore("sem-differ", 2)
	require.NoError(t, err)
	three, err := lks[1].Semaphore("sem-differ", 3)
	require.NoError(t, err)

	taken := time.Now()
	p, err := two.TryAcquire(ctx, WithTTL(time.Second))
	require.NoError(t, err)
	_, err = three.TryAcquire(ctx)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorIs(t, err, node.ErrPermits)
	assert.ErrorContains(t, err, "held under 2 permits, this Semaphore has 3")

	// Renewed past its first lease (the duration under test): the count
	// lives as long as the holds, not as the first lease.
	require.True(t, eventually(5*time.Second, func() bool {
		return time.Since(taken) > 1200*time.Millisecond && p.Until().After(taken.Add(1200*time.Millisecond))
	}), "renewed past the first lease; Err() = %v", p.Err())
	require.NoError(t, p.Err())
	start := time.Now()
	_, err = three.Acquire(ctx)
	assert.ErrorIs(t, err, node.ErrPermits, "Acquire() under another count")
	assert.Less(t, time.Since(start), 5*time.Second, "Acquire() waited on a refusal no wait can fix (retry policy: an hour)")

	// The same count is fine while held.
	q, err := lks[1].Semaphore("sem-differ", 2)
	require.NoError(t, err)
	p2, err := q.TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, p2.Unlock(ctx))

	// Released, and a new count may be chosen.
	require.NoError(t, p.Unlock(ctx))
	n, err := srv.Client(t).Exists(ctx, "{redlock:sem-differ}:sem:permits").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "permit count key left after the last release")
	p3, err := three.TryAcquire(ctx)
	require.NoError(t, err, "TryAcquire() under a new count once no permit is held")
	require.NoError(t, p3.Unlock(ctx))
}

// TestSemaphoreDo: Do holds one permit while fn runs and returns it after,
// also when fn fails; fn's ctx carries the permit.
func TestSemaphoreDo(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t))
	sem, err := lk.Semaphore("pool", 1)
	require.NoError(t, err)
	ctx := context.Background()
	for range 2 { // twice: the first Do returned its permit
		err = sem.Do(ctx, func(fctx context.Context) error {
			l, ok := FromContext(fctx)
			require.True(t, ok)
			assert.NoError(t, l.Err())
			_, err := sem.TryAcquire(ctx)
			assert.ErrorIs(t, err, ErrNotObtained, "a second permit of one")
			return errFnFailed
		})
		require.ErrorIs(t, err, errFnFailed)
		assert.NotErrorIs(t, err, ErrLost)
	}
	var nilSem *Semaphore
	assert.Error(t, nilSem.Do(ctx, func(context.Context) error { return nil }))
}

var errFnFailed = errors.New("fn failed")

// TestSemaphoreDoLossFoundByRelease: fn removes its own permit from the
// server and returns nil; Do still returns an error matching ErrLost
// (Semaphore.Do's doc, semaphore.go: "joined with one matching ErrLost if
// the permit was lost while fn ran", the promise of Locker.Do). Without the
// tracking connection the release is what finds the permit gone.
func TestSemaphoreDoLossFoundByRelease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name, sem string
		opts      []Option
	}{
		{"release finds it", "sem-gone-untracked", []Option{WithLossTracking(false)}},
		{"defaults", "sem-gone-defaults", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lk := newLocker(t, srv.Client(t), tc.opts...)
			s, err := lk.Semaphore(tc.sem, 2)
			require.NoError(t, err)
			err = s.Do(ctx, func(fctx context.Context) error {
				l, ok := FromContext(fctx)
				require.True(t, ok, "FromContext(fn ctx)")
				n, err := admin.ZRem(ctx, l.Key(), l.Owner()).Result()
				require.NoError(t, err)
				require.Equal(t, int64(1), n, "ZREM %s %s", l.Key(), l.Owner())
				return nil // fn "succeeds": Do must still report the loss
			})
			assert.ErrorIs(t, err, ErrLost, "Do() = %v, want ErrLost", err)
		})
	}
}

// TestSemaphoreTokensIncrease: successive permits of one semaphore, taken
// by two Lockers (two processes), with permits held side by side, released,
// and the semaphore emptied between them, carry strictly increasing tokens
// in the order they were taken (Semaphore.Acquire's doc, semaphore.go: "a
// fencing token strictly increasing across the semaphore's permits").
func TestSemaphoreTokensIncrease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lks := twoLockers(t, srv)
	ctx := context.Background()
	var sems [2]*Semaphore
	for i, lk := range lks {
		s, err := lk.Semaphore("sem-tokens", 2)
		require.NoError(t, err)
		sems[i] = s
	}
	var tokens []int64
	take := func(i int) *Lock {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := sems[i].Acquire(actx)
		require.NoError(t, err, "Acquire() by Locker %d", i)
		require.Positive(t, l.Token())
		tokens = append(tokens, l.Token())
		return l
	}
	for range 3 {
		a := take(0)
		b := take(1) // both permits held
		require.NoError(t, a.Unlock(ctx))
		c := take(1) // the permit a returned, the other still held by b
		require.NoError(t, b.Unlock(ctx))
		d := take(0)
		require.NoError(t, c.Unlock(ctx))
		require.NoError(t, d.Unlock(ctx)) // the semaphore is empty again
	}
	for i := 1; i < len(tokens); i++ {
		assert.Greater(t, tokens[i], tokens[i-1], "token of permit %d = %d after %d, want strictly increasing (all: %v)", i, tokens[i], tokens[i-1], tokens)
	}
}

// TestSemaphoreIndependentOfLock: a Semaphore shares nothing with the lock
// and read holds of the same name: a permit is granted while the name is
// write-locked, and while a permit is held the name can be read-held and
// then write-locked.
func TestSemaphoreIndependentOfLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t))
	ctx := context.Background()
	const name = "sem-and-lock"
	sem, err := lk.Semaphore(name, 1)
	require.NoError(t, err)

	w, err := lk.TryLock(ctx, name)
	require.NoError(t, err)
	p, err := sem.TryAcquire(ctx)
	require.NoError(t, err, "TryAcquire() while the name is write-locked")
	require.NoError(t, w.Unlock(ctx))

	r, err := lk.TryRLock(ctx, name)
	require.NoError(t, err, "TryRLock() while the permit is held")
	require.NoError(t, r.Unlock(ctx))
	w, err = lk.TryLock(ctx, name)
	require.NoError(t, err, "TryLock() while the permit is held")
	require.NoError(t, w.Unlock(ctx))
	require.NoError(t, p.Unlock(ctx))
}
