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
	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/internal/scripts"
)

// TestRWLockExclusion: 8 goroutines over two Lockers mix read holds and
// writes on one name. A writer is never inside with anyone, readers are
// inside together, and every call gets its turn.
func TestRWLockExclusion(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lks := twoLockers(t, srv)
	ctx := context.Background()
	var (
		readers, writers atomic.Int32
		maxReaders       atomic.Int32
		bad              atomic.Int32
		wg               sync.WaitGroup
	)
	const workers, iters = 8, 15
	for i := range workers {
		lk := lks[i%2]
		wg.Go(func() {
			for j := range iters {
				cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				if (i+j)%4 == 0 {
					l, err := lk.Lock(cctx, "rw-mix")
					cancel()
					if !assert.NoError(t, err) {
						return
					}
					if writers.Add(1) != 1 || readers.Load() != 0 {
						bad.Add(1)
					}
					time.Sleep(time.Millisecond) // a critical section, not synchronisation
					writers.Add(-1)
					assert.NoError(t, l.Unlock(ctx))
					continue
				}
				l, err := lk.RLock(cctx, "rw-mix")
				cancel()
				if !assert.NoError(t, err) {
					return
				}
				n := readers.Add(1)
				for m := maxReaders.Load(); n > m && !maxReaders.CompareAndSwap(m, n); m = maxReaders.Load() {
				}
				if writers.Load() != 0 {
					bad.Add(1)
				}
				time.Sleep(2 * time.Millisecond)
				readers.Add(-1)
				assert.NoError(t, l.Unlock(ctx))
				assert.Zero(t, l.Token(), "read holds mint no token")
			}
		})
	}
	wg.Wait()
	assert.Zero(t, bad.Load(), "a writer was inside with another holder")
	t.Logf("most readers inside at once: %d", maxReaders.Load())
}

// TestRWLockReadersOverlap: 8 read holds over two Lockers are all held at
// the same moment (each waits inside until all are in), and a writer is
// refused until the last leaves.
func TestRWLockReadersOverlap(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lks := twoLockers(t, srv)
	ctx := context.Background()
	const n = 8
	var in sync.WaitGroup
	in.Add(n)
	all := make(chan struct{})
	holds := make(chan *Lock, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			l, err := lks[i%2].TryRLock(ctx, "rw-overlap")
			if !assert.NoError(t, err) {
				in.Done()
				return
			}
			holds <- l
			in.Done()
			<-all
		})
	}
	in.Wait()
	close(all)
	wg.Wait()
	close(holds)
	require.Len(t, holds, n, "every reader held at once")

	h, err := lks[0].Inspect(ctx, "rw-overlap")
	require.NoError(t, err)
	assert.Equal(t, n, h.Readers)
	assert.True(t, h.Held)
	assert.Empty(t, h.Owner)
	assert.Positive(t, h.TTL)

	_, err = lks[1].TryLock(ctx, "rw-overlap")
	var te *TakenError
	require.ErrorAs(t, err, &te, "a writer while readers hold")
	assert.Empty(t, te.Owner)
	assert.Positive(t, te.TTL)

	var last *Lock
	for l := range holds {
		if last != nil {
			require.NoError(t, last.Unlock(ctx))
		}
		last = l
	}
	_, err = lks[1].TryLock(ctx, "rw-overlap")
	require.ErrorIs(t, err, ErrNotObtained, "one reader still holds")
	require.NoError(t, last.Unlock(ctx))
	w, err := lks[1].TryLock(ctx, "rw-overlap")
	require.NoError(t, err, "the last reader left")
	_, err = lks[0].TryRLock(ctx, "rw-overlap")
	require.ErrorIs(t, err, ErrNotObtained, "a reader while the writer holds")
	require.NoError(t, w.Unlock(ctx))
}

// TestRWLockWriterPreference: once a writer waits, new read holds wait
// behind it, and it gets the name when the readers before it leave.
func TestRWLockWriterPreference(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lks := twoLockers(t, srv, WithRetry(hourRetry))
	ctx := context.Background()
	r1, err := lks[0].TryRLock(ctx, "rw-pref")
	require.NoError(t, err)

	got := make(chan *Lock, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := lks[1].Lock(wctx, "rw-pref")
		assert.NoError(t, err)
		got <- l
	}()
	// The writer's first refused attempt enters it among the waiters.
	writersQueued(t, srv, "rw-pref", 1)
	waitSubscribers(t, srv, "{redlock:rw-pref}:rel", 1)

	_, err = lks[0].TryRLock(ctx, "rw-pref")
	var te *TakenError
	require.ErrorAs(t, err, &te, "a new reader while a writer waits")
	assert.Empty(t, te.Owner)

	// A reader that waits gets in after the writer, not before.
	rgot := make(chan *Lock, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := lks[0].RLock(rctx, "rw-pref")
		assert.NoError(t, err)
		rgot <- l
	}()
	require.True(t, eventually(5*time.Second, func() bool {
		return lks[0].c.Waits.Busy(engine.QueueKey("{redlock:rw-pref}:rel", engine.QueueReaders))
	}))
	waitSubscribers(t, srv, "{redlock:rw-pref}:rel", 2) // both hear every release
	require.NoError(t, r1.Unlock(ctx))
	// Woken by the last reader's release message: the retry policy alone
	// would sleep for the reader's whole lease.
	w := <-got
	require.NotNil(t, w)
	select {
	case <-rgot:
		t.Fatal("a reader got in while the writer held the name")
	default:
	}
	n, err := srv.Client(t).Exists(ctx, "{redlock:rw-pref}:queue").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the writer left the waiting list when it got the name")
	require.NoError(t, w.Unlock(ctx))
	r2 := <-rgot
	require.NotNil(t, r2)
	require.NoError(t, r2.Unlock(ctx))
}

// TestRWLockWriterGivesUp: a waiting writer whose ctx ends withdraws its
// entry, and waiting readers get in at once instead of when it lapses.
func TestRWLockWriterGivesUp(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lks := twoLockers(t, srv, WithRetry(hourRetry))
	ctx := context.Background()
	r1, err := lks[0].TryRLock(ctx, "rw-giveup")
	require.NoError(t, err)
	defer r1.Unlock(ctx)

	wctx, cancel := context.WithCancel(ctx)
	werr := make(chan error, 1)
	go func() {
		_, err := lks[1].Lock(wctx, "rw-giveup")
		werr <- err
	}()
	writersQueued(t, srv, "rw-giveup", 1)
	rctx, rcancel := context.WithTimeout(ctx, 4*time.Second) // the entry would last 5s
	defer rcancel()
	rgot := make(chan error, 1)
	go func() {
		l, err := lks[0].RLock(rctx, "rw-giveup")
		if err == nil {
			err = l.Unlock(ctx)
		}
		rgot <- err
	}()
	waitSubscribers(t, srv, "{redlock:rw-giveup}:rel", 2)
	require.True(t, eventually(5*time.Second, func() bool {
		return lks[0].c.Waits.Busy(engine.QueueKey("{redlock:rw-giveup}:rel", engine.QueueReaders))
	}))
	cancel()
	require.ErrorIs(t, <-werr, context.Canceled)
	require.NoError(t, <-rgot, "the reader got in once the writer gave up")
}

// TestRWLockSameLockerNoDeadlock: readers and writers of one Locker wait in
// queues of their own, so a reader is never stuck behind a writer that
// waits for it, nor a writer behind readers.
func TestRWLockSameLockerNoDeadlock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t))
	other := newLocker(t, srv.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w0, err := other.TryLock(ctx, "rw-queue")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var done atomic.Int32
	for i := range 8 {
		wg.Go(func() {
			var l *Lock
			var err error
			if i%2 == 0 {
				l, err = lk.RLock(ctx, "rw-queue")
			} else {
				l, err = lk.Lock(ctx, "rw-queue")
			}
			if assert.NoError(t, err) {
				assert.NoError(t, l.Unlock(context.Background()))
				done.Add(1)
			}
		})
	}
	require.True(t, eventually(5*time.Second, func() bool { return lk.c.Waits.Busy(engine.ReleaseChannel("{redlock:rw-queue}")) }))
	require.NoError(t, w0.Unlock(ctx))
	wg.Wait()
	assert.EqualValues(t, 8, done.Load())
}

// TestRWLockCrashedReader: a read hold that is never renewed ends at its own
// TTL while another reader keeps renewing: the writer gets in then.
func TestRWLockCrashedReader(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lks := twoLockers(t, srv)
	ctx := context.Background()
	// The live reader's 1s lease is renewed at least once within the crashed
	// one's 1.5s, and is long enough not to be lost to a starved CPU.
	crashed, err := lks[0].TryRLock(ctx, "rw-crash", WithTTL(1500*time.Millisecond), WithAutoRenew(false))
	require.NoError(t, err)
	live, err := lks[1].TryRLock(ctx, "rw-crash", WithTTL(time.Second))
	require.NoError(t, err)
	waitDone(t, crashed, 3*time.Second)
	requireLoss(t, crashed.Err(), LossExpired)
	// Done closes a little before the server's lease ends (drift allowance).
	require.True(t, eventually(3*time.Second, func() bool {
		h, err := lks[1].Inspect(ctx, "rw-crash")
		return err == nil && h.Readers == 1
	}), "the live reader's renewals did not keep the crashed one")
	require.NoError(t, live.Err())
	require.NoError(t, live.Unlock(ctx))
	w, err := lks[0].TryLock(ctx, "rw-crash")
	require.NoError(t, err)
	require.NoError(t, w.Unlock(ctx))
	require.ErrorIs(t, crashed.Unlock(ctx), ErrNotHeld)
}

// TestRWLockHandle: a read hold's release answered a second time
// (a retry after a lost reply) reports success, and the hold's lease is
// measured by TTL and moved by Extend.
func TestRWLockHandle(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t))
	ctx := context.Background()
	l, err := lk.TryRLock(ctx, "rw-handle", WithTTL(5*time.Second), WithAutoRenew(false))
	require.NoError(t, err)
	d, err := l.TTL(ctx)
	require.NoError(t, err)
	assert.InDelta(t, 5*time.Second, d, float64(time.Second))
	require.NoError(t, l.Extend(ctx, 20*time.Second))
	d, err = l.TTL(ctx)
	require.NoError(t, err)
	assert.Greater(t, d, 15*time.Second)
	ok, err := l.Valid(ctx)
	require.NoError(t, err)
	assert.True(t, ok)

	cl := srv.Client(t)
	v, err := scripts.ZRelease.Run(ctx, cl, l.ref().Keys[:2], l.ref().Owner, l.ref().Channel, 1000, "1").Int64()
	require.NoError(t, err)
	require.EqualValues(t, scripts.ReplyOK, v)
	require.NoError(t, l.Unlock(ctx), "the release ran already: a retried call, not a loss")
	require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)

	_, err = lk.TryRLock(ctx, "")
	require.Error(t, err)
	_, err = lk.TryRLock(ctx, "rw-handle", WithTTL(-1))
	require.Error(t, err)
	var nilLk *Locker
	_, err = nilLk.RLock(ctx, "x")
	require.Error(t, err)
	require.NoError(t, lk.Close())
	_, err = lk.RLock(ctx, "rw-handle")
	require.True(t, errors.Is(err, ErrClosed))
}

// TestDoRead: DoRead holds a read hold while fn runs (a writer waits, other
// readers share), releases it after, and cancels fn's ctx with ErrLost
// when the hold is lost.
func TestDoRead(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	lks := twoLockers(t, srv, WithTTL(time.Second), WithRenewInterval(50*time.Millisecond))
	ctx := context.Background()
	err := lks[0].DoRead(ctx, "doc", func(fctx context.Context) error {
		l, ok := FromContext(fctx)
		require.True(t, ok)
		assert.Equal(t, "doc", l.Name())
		_, err := lks[1].TryLock(ctx, "doc")
		assert.ErrorIs(t, err, ErrNotObtained, "a writer got in during a read hold")
		r, err := lks[1].TryRLock(ctx, "doc")
		require.NoError(t, err, "readers share")
		return r.Unlock(ctx)
	})
	require.NoError(t, err)
	w, err := lks[1].TryLock(ctx, "doc")
	require.NoError(t, err, "the read hold was not released")
	require.NoError(t, w.Unlock(ctx))

	err = lks[0].DoRead(ctx, "doc", func(fctx context.Context) error {
		cl.Del(ctx, "{redlock:doc}:readers")
		<-fctx.Done()
		return fctx.Err()
	})
	require.ErrorIs(t, err, ErrLost)
	requireOneLine(t, err)
}
