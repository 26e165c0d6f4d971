package redlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/redistest"
)

// TestObserverSequence: on a real server, one lock's life reaches the
// observer in order with the right outcomes: acquired, renewed, taken by
// someone else, lost with that reason; a contended TryLock and a waiting
// Lock report contention, the holder and the wait.
func TestObserverSequence(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	ctx := context.Background()
	rec := &eventLog{}
	lk := newLocker(t, cl, WithObserver(rec), WithTTL(3*time.Second), WithRenewInterval(50*time.Millisecond))
	other := newLocker(t, srv.Client(t), WithObserver(rec))

	l, err := lk.TryLock(ctx, "obs-life")
	require.NoError(t, err)
	require.True(t, eventually(3*time.Second, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.renews) >= 2
	}), "two renewals observed")

	// Contended TryLock: who holds it and for how long.
	_, err = other.TryLock(ctx, "obs-life")
	require.ErrorIs(t, err, ErrNotObtained)
	var te *TakenError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, l.Owner(), te.Owner)
	assert.Greater(t, te.TTL, time.Second)
	assert.Equal(t, []int{0}, te.Nodes)

	require.NoError(t, cl.Set(ctx, "{redlock:obs-life}", "thief", 10*time.Second).Err())
	waitDone(t, l, 3*time.Second)
	requireLoss(t, l.Err(), LossTaken)
	// OnLoss comes from the goroutine that closed Done, right after it:
	// wait for it before Unlock, whose OnRelease comes from this one, or on
	// a busy machine the sequence below is read before the loss is in it.
	require.True(t, eventually(3*time.Second, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.losses) > 0
	}), "OnLoss within 3s of Done closing")
	assert.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)

	// How many renewals fall between the other events depends on the
	// machine's speed: drop the successful ones, checked above. The
	// tracking connection hears the theft at once; only a renewal already
	// on its way comes first and reports it.
	seq := withoutRenewals(rec.events("obs-life"))
	want := []string{
		"acquire:obs-life:acquired",
		"acquire:obs-life:contended",
		"loss:obs-life:taken",
		"release:obs-life",
	}
	if slices.Contains(seq, "renew:obs-life:err") {
		want = slices.Insert(want, 2, "renew:obs-life:err")
	}
	assert.Equal(t, want, seq)
	assert.Equal(t, "renew:obs-life:ok", rec.events("obs-life")[1], "first event after the acquisition")

	rec.mu.Lock()
	acq := rec.acquires[0]
	assert.Equal(t, Acquired, acq.Outcome)
	assert.Same(t, l, acq.Lock)
	assert.Equal(t, 1, acq.Attempts)
	assert.False(t, acq.Contended)
	assert.Zero(t, acq.WaitTime)
	assert.NotNil(t, acq.Ctx)
	refused := rec.acquires[1]
	assert.True(t, refused.Contended)
	assert.Nil(t, refused.Lock)
	assert.False(t, refused.Wait)
	loss := rec.losses[0]
	assert.Same(t, l, loss.Lock)
	assert.Positive(t, loss.Held)
	assert.ErrorIs(t, rec.releases[0].Err, ErrNotHeld)
	rec.mu.Unlock()

	// A Lock that waits for the holder's Unlock: contended, with a wait.
	holder, err := lk.TryLock(ctx, "obs-wait")
	require.NoError(t, err)
	got := make(chan *Lock, 1)
	go func() {
		wl, err := other.Lock(ctx, "obs-wait")
		assert.NoError(t, err)
		got <- wl
	}()
	waiting(t, other.c, "obs-wait")
	require.NoError(t, holder.Unlock(ctx))
	wl := <-got
	require.NotNil(t, wl)
	require.NoError(t, wl.Unlock(ctx))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var waited *AcquireEvent
	for i := range rec.acquires {
		if e := &rec.acquires[i]; e.Name == "obs-wait" && e.Wait {
			waited = e
		}
	}
	require.NotNil(t, waited)
	assert.Equal(t, Acquired, waited.Outcome)
	assert.True(t, waited.Contended)
	assert.GreaterOrEqual(t, waited.Attempts, 2)
	assert.Positive(t, waited.WaitTime)
	assert.LessOrEqual(t, waited.WaitTime, waited.Duration)
	for _, r := range rec.releases {
		if r.Name == "obs-wait" {
			assert.NoError(t, r.Err)
			assert.Positive(t, r.Held)
		}
	}
}

// withoutRenewals drops the successful renewals from seq.
func withoutRenewals(seq []string) []string {
	var out []string
	for _, s := range seq {
		if !strings.HasPrefix(s, "renew:") || !strings.HasSuffix(s, ":ok") {
			out = append(out, s)
		}
	}
	return out
}

// TestObserverCanceledAndClosed: a Lock cut short by its ctx reports
// Canceled; Close reports the loss of every held lock.
func TestObserverCanceledAndClosed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rec := &eventLog{}
	lk, err := NewLocker(srv.Client(t), WithObserver(rec))
	require.NoError(t, err)
	ctx := context.Background()
	l, err := lk.TryLock(ctx, "obs-close")
	require.NoError(t, err)
	other := newLocker(t, srv.Client(t), WithObserver(rec))
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = other.Lock(cctx, "obs-close")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, lk.Close())
	requireLoss(t, l.Err(), LossClosed)
	assert.Equal(t, []string{
		"acquire:obs-close:acquired",
		"acquire:obs-close:canceled",
		"loss:obs-close:closed",
	}, rec.events("obs-close"))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.True(t, rec.acquires[1].Contended)
	var te *TakenError
	assert.ErrorAs(t, rec.acquires[1].Err, &te)
}

// TestObserverRedlockNodeErrors: a dead master shows up as node errors of
// the acquire and of the renewals, while the lock is held by the others.
func TestObserverRedlockNodeErrors(t *testing.T) {
	t.Parallel()
	nodes := startRLNodes(t, 3, false, time.Second)
	rec := &eventLog{}
	r := newRL(t, nodes, WithObserver(rec), WithTTL(2*time.Second), WithRenewInterval(50*time.Millisecond))
	warmUp(t, r)
	ctx := context.Background()
	l, err := r.TryLock(ctx, "obs-rl")
	require.NoError(t, err)
	nodes[2].srv.Kill(t)
	failed := func(name, op string, node int) bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, e := range rec.nodes {
			if e.Name == name && e.Op == op && e.Err.Node == node {
				return true
			}
		}
		return false
	}
	require.True(t, eventually(3*time.Second, func() bool { return failed("obs-rl", engine.OpRenew, 2) }),
		"node 2 errors for the renewals: %v", rec.nodeEvents())
	require.NoError(t, l.Err(), "held by the other two")
	require.NoError(t, l.Unlock(ctx))

	// With two masters down an acquisition fails, and says where.
	nodes[1].srv.Kill(t)
	_, err = r.TryLock(ctx, "obs-rl-2")
	require.ErrorIs(t, err, ErrNotObtained)
	assert.True(t, failed("obs-rl-2", engine.OpAcquire, 1), "node 1: %v", rec.nodeEvents())
	assert.True(t, failed("obs-rl-2", engine.OpAcquire, 2), "node 2: %v", rec.nodeEvents())
	rec.mu.Lock()
	for _, e := range rec.nodes {
		assert.NotEqual(t, 0, e.Err.Node, "the live master never fails: %v", e.Err)
	}
	rec.mu.Unlock()
	assert.Contains(t, rec.events("obs-rl"), "release:obs-rl")
	assert.Contains(t, rec.events("obs-rl-2"), "acquire:obs-rl-2:failed")
}

// TestObserverMaxHold: the cap is reported as a loss with its reason.
func TestObserverMaxHold(t *testing.T) {
	t.Parallel()
	cl, _ := miniClient(t)
	rec := &eventLog{}
	lk := newLocker(t, cl, WithObserver(rec), WithMaxHold(100*time.Millisecond))
	l, err := lk.TryLock(context.Background(), "obs-max")
	require.NoError(t, err)
	waitDone(t, l, 3*time.Second)
	want := []string{"acquire:obs-max:acquired", "loss:obs-max:max_hold"}
	// OnLoss runs right after Done closes, on the loss clock's goroutine.
	assert.Eventually(t, func() bool { return len(rec.events("obs-max")) == 2 }, 3*time.Second, 5*time.Millisecond)
	assert.Equal(t, want, rec.events("obs-max"))
}

// TestObserverUnsetAllocatesNothing: the hook calls on every path cost no
// allocation without an observer.
func TestObserverUnsetAllocatesNothing(t *testing.T) {
	cfg := engine.DefaultConfig()
	ctx := context.Background()
	err := errors.Join(ErrNotObtained, &NodeError{Err: node.ErrTimeout})
	l := &engine.Hold{Name: "x"}
	allocs := testing.AllocsPerRun(100, func() {
		tr := engine.NewAcquireTrace(ctx, &cfg, "x", true)
		tr.Attempted(err)
		tr.Done(l, nil)
		engine.ReportNodes(cfg.Observer, "x", engine.OpAcquire, err)
	})
	assert.Zero(t, allocs)
}

// BenchmarkObserver measures TryLock+Unlock on a real server without an
// observer and with one that does nothing: the cost of the hooks.
func BenchmarkObserver(b *testing.B) {
	srv := redistest.Start(b)
	for _, bc := range []struct {
		name string
		opts []Option
	}{
		{"unset", nil},
		{"nop", []Option{WithObserver(NopObserver{})}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			lk := newLocker(b, srv.Client(b), bc.opts...)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				l, err := lk.TryLock(ctx, "bench-obs")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestObserverPerCall: WithObserver given per call is the observer of that
// call's lock instead of the Locker's: it sees the lock's acquisition and
// release, and the Locker's sees nothing of them; nil removes the observer
// for the call. The Locker's observer still sees the other calls.
func TestObserverPerCall(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	base, own := &eventLog{}, &eventLog{}
	lk := newLocker(t, srv.Client(t), WithObserver(base))
	calls := []struct {
		name string
		opts []Option
	}{
		{"obs-own", []Option{WithObserver(own)}},
		{"obs-none", []Option{WithObserver(nil)}},
		{"obs-base", nil},
	}
	for _, c := range calls {
		l, err := lk.TryLock(ctx, c.name, c.opts...)
		require.NoError(t, err, "TryLock(%q)", c.name)
		require.NoError(t, l.Unlock(ctx), "Unlock(%q)", c.name)
	}
	seq := func(r *eventLog) []string {
		r.mu.Lock()
		defer r.mu.Unlock()
		return slices.Clone(r.seq)
	}
	assert.Equal(t, []string{"acquire:obs-own:acquired", "release:obs-own"}, seq(own), "the per-call observer's events")
	assert.Equal(t, []string{"acquire:obs-base:acquired", "release:obs-base"}, seq(base), "the Locker's observer's events")
}
