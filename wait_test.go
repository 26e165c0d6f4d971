package redlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlockgo/redlock/internal/redistest"
)

// pubsubClients counts the server's pub/sub connections.
func pubsubClients(t testing.TB, srv *redistest.Server) int {
	t.Helper()
	list, _ := srv.Do(t, "CLIENT", "LIST", "TYPE", "pubsub").(string)
	return strings.Count(list, "\n")
}

// TestUncontendedLockSkipsPubSub: a Lock that gets the lock at once opens no
// pub/sub connection and subscribes nothing.
func TestUncontendedLockSkipsPubSub(t *testing.T) {
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t))
	ctx := context.Background()
	for range 100 {
		l, err := lk.Lock(ctx, "alone")
		if err != nil {
			t.Fatalf("Lock() = %v", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock() = %v", err)
		}
	}
	if n := commandCalls(t, srv, "subscribe"); n != 0 {
		t.Errorf("%d SUBSCRIBE calls for 100 uncontended Lock calls, want 0", n)
	}
}

// TestWaitContention: 8 goroutines x 200 critical sections on one name. The
// counter is exact, no waiter starves, one pub/sub connection serves them
// all, and a release wakes one goroutine, not all of them.
func TestWaitContention(t *testing.T) {
	srv := redistest.Start(t)
	cl := srv.Client(t)
	hook := &countingHook{}
	cl.AddHook(hook)
	lk := newLocker(t, cl, WithTTL(5*time.Second))
	const workers, iters = 8, 200
	// Bound on one Lock call: FIFO means at most 7 critical sections (a few
	// round trips each) ahead of any waiter; 1s leaves room for -race on 2 cores.
	const maxWaitBound = time.Second

	stop := make(chan struct{})
	monitorDone := make(chan int)
	go func() {
		most := 0
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				monitorDone <- most
				return
			case <-tick.C:
				most = max(most, pubsubClients(t, srv))
			}
		}
	}()

	start := hook.scripts.Load()
	waits := hammer(t, lk, cl, "contended", "wait:counter", workers, iters).waits
	close(stop)
	most := <-monitorDone
	slices.Sort(waits)
	if longest := waits[len(waits)-1]; longest > maxWaitBound {
		t.Errorf("longest Lock wait = %v, want <= %v", longest, maxWaitBound)
	}
	// The channel stays subscribed while a goroutine of ours holds the name,
	// so hand-offs do not churn SUBSCRIBE/UNSUBSCRIBE.
	if subs := commandCalls(t, srv, "subscribe"); subs > 20 {
		t.Errorf("%d SUBSCRIBE calls for %d critical sections, want a handful", subs, workers*iters)
	}
	// Redis stops counting a connection as pub/sub once it has no channel
	// left, so the count is taken while waiters exist.
	if most != 1 {
		t.Errorf("pub/sub connections during the run: at most %d, want 1", most)
	}
	// Each critical section costs one acquire and one release script; the
	// rest are failed attempts. A thundering herd would add ~7 per section.
	calls := float64(hook.scripts.Load()-start) / (workers * iters)
	if calls > 3 {
		t.Errorf("%.2f script calls per critical section, want <= 3", calls)
	}
	t.Logf("%d sections: median wait %v, p99 %v, max %v; %.2f script calls per section",
		len(waits), waits[len(waits)/2], waits[len(waits)*99/100], waits[len(waits)-1], calls)
}

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

// TestWaitWakesOnRelease: a waiter sleeps through a long hold without
// polling, then gets the lock right after the release.
func TestWaitWakesOnRelease(t *testing.T) {
	srv := redistest.Start(t)
	holderLk := newLocker(t, srv.Client(t))
	wcl := srv.Client(t)
	hook := &countingHook{}
	wcl.AddHook(hook)
	waiterLk := newLocker(t, wcl)
	ctx := context.Background()

	h, err := holderLk.TryLock(ctx, "wake")
	if err != nil {
		t.Fatalf("TryLock() = %v", err)
	}
	got := make(chan time.Time, 1)
	go func() {
		l, err := waiterLk.Lock(ctx, "wake")
		got <- time.Now()
		if err != nil {
			t.Errorf("waiter Lock() = %v", err)
			return
		}
		l.Unlock(ctx)
	}()
	waiting(t, waiterLk.c, "wake")
	time.Sleep(500 * time.Millisecond) // the hold being measured, not a synchronisation
	attempts := hook.scripts.Load()
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}
	released := time.Now()
	acquiredAt := <-got
	if gap := acquiredAt.Sub(released); gap > 100*time.Millisecond {
		t.Errorf("waiter acquired %v after the release, want within a few round trips", gap)
	}
	// Polling every 4..512ms would take ~7 attempts in 500ms; waiting on
	// pub/sub takes the first try and one poll that covers the SUBSCRIBE race.
	if attempts > 3 {
		t.Errorf("waiter made %d attempts during a 500ms hold, want <= 3", attempts)
	}
	t.Logf("hand-off %v after release; %d attempts during the hold", acquiredAt.Sub(released), attempts)
}

func TestWaitCancel(t *testing.T) {
	srv := redistest.Start(t)
	cl := srv.Client(t)
	lk := newLocker(t, cl)
	other := newLocker(t, srv.Client(t))
	ctx := context.Background()
	h, err := other.TryLock(ctx, "cancel")
	if err != nil {
		t.Fatalf("TryLock() = %v", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	var cancelledAt time.Time
	go func() {
		_, err := lk.Lock(wctx, "cancel")
		done <- err
	}()
	waiting(t, lk.c, "cancel")
	channel := releaseChannel(lockKey("redlock:", "cancel"))
	// The SUBSCRIBE goes out from another goroutine; wait until the server
	// has it, so the check after the cancel below is about the grace period.
	if !eventually(2*time.Second, func() bool {
		return cl.PubSubNumSub(ctx, channel).Val()[channel] == 1
	}) {
		t.Fatalf("channel %s never subscribed while a goroutine waited", channel)
	}
	cancelledAt = time.Now()
	cancel()
	err = <-done
	if took := time.Since(cancelledAt); took > 50*time.Millisecond {
		t.Errorf("Lock returned %v after cancel, want promptly", took)
	}
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Errorf("Lock(cancelled) = %v, want ErrNotObtained and Canceled", err)
	}
	if n := cl.PubSubNumSub(ctx, channel).Val()[channel]; n != 1 {
		t.Errorf("channel %s has %d subscribers right after the waiter left, want 1 (kept for idleGrace)", channel, n)
	}
	if !eventually(idleGrace+2*time.Second, func() bool {
		return cl.PubSubNumSub(ctx, channel).Val()[channel] == 0
	}) {
		t.Errorf("channel %s still subscribed %v after the only waiter left", channel, idleGrace+2*time.Second)
	}
	if got := get(t, cl, "{redlock:cancel}"); got != h.Owner() {
		t.Errorf("lock key = %q, want the holder's only", got)
	}
}

// TestWaitFIFO: a goroutine that unlocks and locks again at once goes behind
// the goroutine already waiting.
func TestWaitFIFO(t *testing.T) {
	cl, _ := miniClient(t)
	lk := newLocker(t, cl)
	ctx := context.Background()
	a, err := lk.TryLock(ctx, "fifo")
	if err != nil {
		t.Fatalf("TryLock() = %v", err)
	}
	order := make(chan string, 2)
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		b, err := lk.Lock(ctx, "fifo")
		if err != nil {
			t.Errorf("B Lock() = %v", err)
			return
		}
		order <- "B"
		b.Unlock(ctx)
	}()
	waiting(t, lk.c, "fifo")
	if err := a.Unlock(ctx); err != nil {
		t.Fatalf("A Unlock() = %v", err)
	}
	a2, err := lk.Lock(ctx, "fifo")
	if err != nil {
		t.Fatalf("A Lock() again = %v", err)
	}
	order <- "A"
	a2.Unlock(ctx)
	<-bDone
	if first := <-order; first != "B" {
		t.Errorf("first to get the lock after A's release = %s, want B (already waiting)", first)
	}
}

// TestWaitPubSubDropped: the pub/sub connection is killed while a goroutine
// waits; the waiter still gets the lock after the release (reconnect or
// polling fallback).
func TestWaitPubSubDropped(t *testing.T) {
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t))
	other := newLocker(t, srv.Client(t))
	ctx := context.Background()
	h, err := other.TryLock(ctx, "dropped")
	if err != nil {
		t.Fatalf("TryLock() = %v", err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := lk.Lock(ctx, "dropped")
		if err == nil {
			l.Unlock(ctx)
		}
		got <- err
	}()
	waiting(t, lk.c, "dropped")
	srv.Do(t, "CLIENT", "KILL", "TYPE", "pubsub")
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("waiter Lock() = %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("waiter did not get the lock within 3s of the release after its pub/sub connection died")
	}
}

// TestCloseWhileWaiting: Close with goroutines waiting (and some about to
// wait) returns, the waiters fail with ErrClosed, and no goroutine is left.
func TestCloseWhileWaiting(t *testing.T) {
	cl, _ := miniClient(t)
	lk, err := NewLocker(cl)
	if err != nil {
		t.Fatalf("NewLocker() = %v", err)
	}
	other := newLocker(t, cl)
	ctx := context.Background()
	if _, err := other.TryLock(ctx, "busy"); err != nil {
		t.Fatalf("TryLock() = %v", err)
	}
	errs := make(chan error, 20)
	for range 20 {
		go func() {
			_, err := lk.Lock(ctx, "busy")
			errs <- err
		}()
	}
	waiting(t, lk.c, "busy")
	closed := make(chan struct{})
	go func() { lk.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatalf("Close() did not return within 5s with waiters")
	}
	for range 20 {
		if err := <-errs; !errors.Is(err, ErrClosed) && !errors.Is(err, ErrNotObtained) {
			t.Errorf("waiter Lock() after Close = %v, want ErrClosed or ErrNotObtained", err)
		}
	}
}

// TestWaitTwoProcesses: two Lockers (two processes) trade one lock in a
// loop. The channel stays subscribed across hand-offs (idleGrace), so
// SUBSCRIBE is not paid per critical section.
func TestWaitTwoProcesses(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	const iters = 100
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		lk := newLocker(t, srv.Client(t))
		wg.Go(func() {
			for range iters {
				l, err := lk.Lock(ctx, "traded")
				if err != nil {
					errs <- err
					return
				}
				if err := l.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Lock/Unlock: %v", err)
	}
	if n := commandCalls(t, srv, "subscribe"); n > 10 {
		t.Errorf("%d SUBSCRIBE calls for %d critical sections by two processes, want a handful", n, 2*iters)
	}
}
