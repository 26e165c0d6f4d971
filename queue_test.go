package redlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/internal/scripts"
)

// pubsubClients counts the server's pub/sub connections.
func pubsubClients(t testing.TB, srv *redistest.Server) int {
	t.Helper()
	list, _ := srv.Do(t, "CLIENT", "LIST", "TYPE", "pubsub").(string)
	// The tracking connection (internal/engine/track.go) is not the waiters'.
	return strings.Count(list, "\n") - strings.Count(list, "name=redlock-tracking ")
}

// TestWaitContention: 8 goroutines x 200 critical sections on one name. The
// counter is exact, no waiter starves, one pub/sub connection serves them
// all, and a release wakes one goroutine, not all of them.
func TestWaitContention(t *testing.T) {
	t.Parallel()
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
	channel := engine.ReleaseChannel(engine.LockKey("redlock:", "cancel"))
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
	if !eventually(engine.IdleGrace+2*time.Second, func() bool {
		return cl.PubSubNumSub(ctx, channel).Val()[channel] == 0
	}) {
		t.Errorf("channel %s still subscribed %v after the only waiter left", channel, engine.IdleGrace+2*time.Second)
	}
	if got := get(t, cl, "{redlock:cancel}"); got != h.Owner() {
		t.Errorf("lock key = %q, want the holder's only", got)
	}
}

// TestWaitFIFO: a goroutine that unlocks and locks again at once goes behind
// the goroutine already waiting.
func TestWaitFIFO(t *testing.T) {
	t.Parallel()
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

// queuedHere is how many Lock calls of lk wait in its local queue for name.
func queuedHere(lk *Locker, name string) int {
	ch := engine.ReleaseChannel(engine.LockKey(lk.c.Cfg.Prefix, name))
	lk.c.Waits.Mu.Lock()
	defer lk.c.Waits.Mu.Unlock()
	if q := lk.c.Waits.Queues[ch]; q != nil {
		return len(q.List)
	}
	return 0
}

// burstStart pauses srv and starts calls Lock calls of lk on name, one
// after the other, each recording itself in order once it holds the name
// and then unlocking. The first call's attempt goes out and stays on the
// wire; each later one must queue behind it in lk, sending nothing: the
// test fails if one never queues or one sends an attempt. It returns with
// the server paused; wait then waits for the calls once the caller resumed
// it, and gives the order in which they held the name.
func burstStart(t *testing.T, srv *redistest.Server, lk *Locker, acquires *scriptCalls, name string, calls int) (wait func() []int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	sent := acquires.n.Load()
	srv.Pause(t)
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range calls {
		wg.Go(func() {
			l, err := lk.Lock(ctx, name)
			if !assert.NoError(t, err, "call %d: Lock()", i) {
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			assert.NoError(t, l.Unlock(ctx), "call %d: Unlock()", i)
		})
		if i == 0 {
			if !eventually(5*time.Second, func() bool { return acquires.n.Load() > sent }) {
				srv.Resume(t)
				t.Fatal("the first call's attempt never went out")
			}
			continue
		}
		if !eventually(5*time.Second, func() bool { return queuedHere(lk, name) == i }) {
			srv.Resume(t)
			t.Fatalf("call %d never queued behind the first call's attempt (%d attempts sent)", i, acquires.n.Load()-sent)
		}
	}
	// The queue's head wakes by its timer meanwhile (every millisecond in
	// TestBurstSendsOneAttempt), and must not try while the first attempt
	// is on the wire: give it a few dozen wake-ups to be caught at it.
	time.Sleep(30 * time.Millisecond)
	if got := acquires.n.Load() - sent; got != 1 {
		srv.Resume(t)
		t.Fatalf("%d attempts sent while the first one was on the wire, want 1", got)
	}
	return func() []int {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return order
	}
}

// burstLocker starts a server and a Locker on it whose client counts the
// acquire scripts it sends: a lease of 20 s and a node timeout of 10 s, so
// that an attempt held up by a paused server is answered late, not given up.
func burstLocker(t *testing.T, opts ...Option) (*redistest.Server, *Locker, *scriptCalls) {
	t.Helper()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	acquires := countScript(scripts.Acquire)
	cl.AddHook(acquires)
	base := []Option{WithTTL(20 * time.Second), WithNodeTimeout(10 * time.Second), WithLossTracking(false)}
	return srv, newLocker(t, cl, append(base, opts...)...), acquires
}

// TestBurstSendsOneAttempt: Lock calls of one Locker that come while
// another one's first attempt at the name is on the wire queue behind it
// instead of sending attempts of their own, which the server would refuse
// while the first one holds the name (entering each in the name's queue of
// waiting writers and marking the name waited for, so that its releases
// publish for the next 10 s and more). With the server paused the first
// attempt stays on the wire: seven more calls queue and send nothing. Once
// it resumes, the name passes from hand to hand in arrival order. The calls
// retry every millisecond, so the head of the queue wakes often by its
// timer while the first attempt is on the wire.
func TestBurstSendsOneAttempt(t *testing.T) {
	t.Parallel()
	srv, lk, acquires := burstLocker(t, WithRetry(ConstantRetry(time.Millisecond)))
	// Contention first, so that the name's channel stays subscribed for a
	// while (IdleGrace): a call that queues then waits for no SUBSCRIBE and
	// goes straight to its timer.
	ctx := context.Background()
	held, err := lk.TryLock(ctx, "burst")
	require.NoError(t, err)
	next := waitBehind(t, lk, "burst")
	require.NoError(t, held.Unlock(ctx))
	require.NoError(t, next().Unlock(ctx))
	wait := burstStart(t, srv, lk, acquires, "burst", 8)
	srv.Resume(t)
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, wait(), "order of holding")
}

// TestBurstRefusedFirstGoesAhead: a Lock call that others queued behind
// while its first attempt was on the wire, refused, waits ahead of them: it
// came first. Another Locker holds the name and does not renew it. With
// the server paused, call 0's attempt stays on the wire and call 1 queues
// behind it; once the server answers, call 0 is refused. The other holder's
// lease then runs out with no release to announce it, so the head of the
// queue takes the name by its timer: call 0, which hands it to call 1.
func TestBurstRefusedFirstGoesAhead(t *testing.T) {
	t.Parallel()
	srv, lk, acquires := burstLocker(t)
	ctx := context.Background()
	other := newLocker(t, srv.Client(t), WithTTL(3*time.Second), WithAutoRenew(false), WithLossTracking(false))
	_, err := other.TryLock(ctx, "burst-refused")
	require.NoError(t, err)
	warmLocker(t, lk)
	wait := burstStart(t, srv, lk, acquires, "burst-refused", 2)
	srv.Resume(t)
	assert.Equal(t, []int{0, 1}, wait(), "order of holding")
}

// warmLocker takes and releases a name of its own with lk: a connection open
// and the acquire script loaded, so that the next attempt is one EVALSHA.
func warmLocker(t *testing.T, lk *Locker) {
	t.Helper()
	ctx := context.Background()
	l, err := lk.TryLock(ctx, "warm-up")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
}

// TestWaitTwoProcesses: two Lockers (two processes) trade one lock in a
// loop. The channel stays subscribed across hand-offs (IdleGrace), so
// SUBSCRIBE is not paid per critical section.
func TestWaitTwoProcesses(t *testing.T) {
	t.Parallel()
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

// TestHandOffLetsOtherProcessesIn: a process whose goroutines keep its local
// queue full hands the name on among themselves at most maxHandOffs times in
// a row, so a waiter of another process still gets the lock.
func TestHandOffLetsOtherProcessesIn(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	other := newLocker(t, srv.Client(t))
	ctx := context.Background()
	hog(t, newLocker(t, srv.Client(t)), "hog")
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := other.Lock(lctx, "hog")
	require.NoError(t, err, "another process's waiter starved by hand-offs")
	require.NoError(t, l.Unlock(ctx))
}

// TestHandOffCapFreesTheName: a Locker whose goroutines keep its own queue
// full hands the name on at most 8 times in a row, then releases it
// (release.lua), which frees the name or passes it to the first process
// queued on the server. The hog's own client shows what its Unlocks sent,
// in order (each Unlock waits for the grant the one before it made): runs
// of hand-offs cut by releases, none longer than 8. Without the cap the
// name would pass from hand to hand and never be released.
// A TryLock from another process is not promised the name then: the
// release reserves it for a waiter the server queued (DESIGN.md "Fair
// waiting and the hand-off"), which may be the hog's own next one.
func TestHandOffCapFreesTheName(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	sent := &unlockScripts{handOff: countScript(scripts.HandOff), release: countScript(scripts.Release)}
	cl.AddHook(sent)
	hog(t, newLocker(t, cl), "capped")
	const handOffs, releases = 64, 4
	require.True(t, eventually(10*time.Second, func() bool {
		h, r := sent.counts()
		return h >= handOffs && r >= releases
	}), "hand-offs and releases of the hog's Unlocks: %s", sent)
	assert.LessOrEqual(t, sent.longestRun(), 8, "hand-offs in a row: %s", sent)
}

// unlockScripts is a client hook that records, in the order they were
// sent, the hand-off ('h') and release ('r') scripts that ran: an EVALSHA
// refused with NOSCRIPT, and then sent again as EVAL, counts once.
type unlockScripts struct {
	handOff, release *scriptCalls // which script a command runs
	mu               sync.Mutex
	seq              []byte
}

func (u *unlockScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (u *unlockScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		var kind byte
		switch {
		case u.handOff.count(cmd) > 0:
			kind = 'h'
		case u.release.count(cmd) > 0:
			kind = 'r'
		}
		if kind != 0 {
			// Recorded at the send, in the order of the Unlocks.
			u.mu.Lock()
			i := len(u.seq)
			u.seq = append(u.seq, kind)
			u.mu.Unlock()
			defer func() {
				if cmd.Err() != nil {
					u.mu.Lock()
					u.seq[i] = '-' // refused (NOSCRIPT) or failed: not an Unlock's outcome
					u.mu.Unlock()
				}
			}()
		}
		return next(ctx, cmd)
	}
}

func (u *unlockScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// counts is how many hand-offs and releases ran.
func (u *unlockScripts) counts() (handOffs, releases int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return bytes.Count(u.seq, []byte{'h'}), bytes.Count(u.seq, []byte{'r'})
}

// longestRun is the most hand-offs that ran with no release between them.
func (u *unlockScripts) longestRun() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	longest, run := 0, 0
	for _, k := range u.seq {
		switch k {
		case 'h':
			run++
			longest = max(longest, run)
		case 'r':
			run = 0
		}
	}
	return longest
}

func (u *unlockScripts) String() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return string(u.seq)
}

// hog keeps lk's local queue for name full until the test ends: four
// goroutines each take the lock, hold it a millisecond and unlock, over
// and over. It returns once one of them waits.
func hog(t *testing.T, lk *Locker, name string) {
	t.Helper()
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := lk.Lock(ctx, name)
				if err != nil {
					return
				}
				time.Sleep(time.Millisecond) // the critical section
				_ = l.Unlock(ctx)
			}
		})
	}
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
	})
	waiting(t, lk.c, name)
}

// TestReservedWaiterWokenByHead: a release passed the name to a waiter of
// this Locker that is not the head of its queue, and its wake-up message was
// lost (it came before the subscription). The head, refused by the
// reservation, wakes it, instead of the name staying reserved for nobody
// until the reservation lapses.
func TestReservedWaiterWokenByHead(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	lk := newLocker(t, cl, WithRetry(func(int) time.Duration { return 50 * time.Millisecond }))
	ctx := context.Background()
	const key = "{redlock:resv}"
	require.NoError(t, cl.Set(ctx, key, "external", 300*time.Millisecond).Err())
	got := make(chan *Lock, 2)
	lock := func() {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := lk.Lock(c, "resv")
		assert.NoError(t, err)
		got <- l
	}
	go lock()
	waiting(t, lk.c, "resv")
	go lock()
	var second string
	require.True(t, eventually(5*time.Second, func() bool {
		lk.c.Waits.Mu.Lock()
		defer lk.c.Waits.Mu.Unlock()
		q := lk.c.Waits.Queues[engine.ReleaseChannel(key)]
		if q == nil || len(q.List) < 2 {
			return false
		}
		second = q.List[1].WID
		return true
	}))
	// Passed to the second waiter, whose message never came; the
	// reservation outlasts both calls' deadlines.
	require.NoError(t, cl.Set(ctx, key, scripts.ReservedPrefix+second, 10*time.Second).Err())
	l := <-got
	require.NotNil(t, l, "the reserved waiter took the name")
	require.NoError(t, l.Unlock(ctx))
	l = <-got
	require.NotNil(t, l, "and the head after it")
	require.NoError(t, l.Unlock(ctx))
}

// TestHandOffSkipsWaitersThatGaveUp (the rueidislock suite's MissingPeers
// case): 100 waiters whose ctx was cancelled before the holder's Unlock
// are never handed the lock, and none returns one; the name is free for
// another Locker once they have all returned (within moments: an attempt
// still on the wire may grant after its call returned, and is released as
// soon as it does). 20 rounds.
func TestHandOffSkipsWaitersThatGaveUp(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	lk := newLocker(t, srv.Client(t), WithRetry(ConstantRetry(time.Hour)))
	other := newLocker(t, srv.Client(t))
	ctx := context.Background()
	const waiters = 100
	ch := engine.ReleaseChannel(engine.LockKey(lk.c.Cfg.Prefix, "gave-up"))
	queued := func() int {
		lk.c.Waits.Mu.Lock()
		defer lk.c.Waits.Mu.Unlock()
		if q := lk.c.Waits.Queues[ch]; q != nil {
			return len(q.List)
		}
		return 0
	}
	for round := range 20 {
		holder, err := lk.TryLock(ctx, "gave-up")
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(ctx)
		errs := make(chan error, waiters)
		for range waiters {
			go func() {
				w, err := lk.Lock(wctx, "gave-up")
				if err == nil {
					err = fmt.Errorf("Lock() = %v with a cancelled ctx, want an error", w.Owner())
					_ = w.Unlock(ctx)
				}
				errs <- err
			}()
		}
		require.True(t, eventually(5*time.Second, func() bool { return queued() == waiters }), "round %d: %d of %d waiters queued", round, queued(), waiters)
		cancel()
		require.NoError(t, holder.Unlock(ctx))
		for range waiters {
			err := <-errs
			require.ErrorIs(t, err, ErrNotObtained, "round %d", round)
			require.ErrorIs(t, err, context.Canceled, "round %d", round)
		}
		// The waiters leave the server's queue right after their calls
		// returned (withdrawals run on); until they have, another Locker's
		// release may reserve the name for one of them, for up to its node
		// timeout (SAFETY.md "A reservation nobody claims"), and the next
		// round's TryLock would meet that reservation.
		require.True(t, eventually(5*time.Second, func() bool { return lk.c.Withdraw.N.Load() == 0 }),
			"round %d: the waiters' withdrawals from the queue finished", round)
		// A waiter's attempt still on the wire when its ctx ended may grant
		// after the call returned; that grant is released as soon as it
		// arrives, so the name is free within moments, not at once.
		var l *Lock
		require.True(t, eventually(time.Second, func() bool {
			l, err = other.TryLock(ctx, "gave-up")
			return err == nil
		}), "round %d: TryLock after every waiter gave up = %v; the name is held by %q", round, err, get(t, admin, "{redlock:gave-up}"))
		require.NoError(t, l.Unlock(ctx))
	}
}

// TestHandOffPassesOverGivenUpHead: a waiter whose ctx ended but which has
// not left the queue yet (its Lock call is still on its way out) is passed
// over: the Unlock hands the lock to the live waiter behind it, and the one
// that gave up is handed nothing.
func TestHandOffPassesOverGivenUpHead(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t), WithRetry(ConstantRetry(time.Hour)))
	ctx := context.Background()
	holder, err := lk.TryLock(ctx, "dead-head")
	require.NoError(t, err)
	ch := engine.ReleaseChannel(engine.LockKey(lk.c.Cfg.Prefix, "dead-head"))
	gone, cancel := context.WithCancel(ctx)
	cancel()
	dead, _ := lk.c.Waits.Join(ch, "dead-head", "", &lk.c.Cfg, gone.Done(), false)
	got := make(chan *Lock, 1)
	go func() {
		l, err := lk.Lock(ctx, "dead-head")
		assert.NoError(t, err)
		got <- l
	}()
	require.True(t, eventually(5*time.Second, func() bool {
		lk.c.Waits.Mu.Lock()
		defer lk.c.Waits.Mu.Unlock()
		return len(lk.c.Waits.Queues[ch].List) == 2
	}), "the live waiter never queued behind the one that gave up")
	require.NoError(t, holder.Unlock(ctx))
	select {
	case l := <-got:
		require.NotNil(t, l)
		assert.Greater(t, l.Token(), holder.Token())
		require.NoError(t, l.Unlock(ctx))
	case <-time.After(2 * time.Second):
		t.Fatal("the live waiter was not handed the lock within 2s; the hand-off went to the waiter that gave up")
	}
	assert.Empty(t, dead.Handed, "a waiter that gave up was handed a lock")
	lk.c.Waits.Leave(ch, dead, false)
}

// TestWithdrawnWriterNotQueuedAgain: an attempt of a Lock call that gave up
// can reach the server after the call's withdrawal (it was on the wire when
// the ctx ended). It must not enter the writer in the queue again: the next
// release would reserve the name for a writer that left, and the name
// would stay reserved for the reservation's length (CI saw "held by owner
// queued:<id>" for 999ms in TestHandOffSkipsWaitersThatGaveUp).
func TestWithdrawnWriterNotQueuedAgain(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	lk := newLocker(t, srv.Client(t))
	other := newLocker(t, srv.Client(t))
	ctx := context.Background()
	holder, err := lk.TryLock(ctx, "ghost")
	require.NoError(t, err)
	tag := engine.LockKey(lk.c.Cfg.Prefix, "ghost")
	keys := []string{tag, tag + scripts.FenceSuffix, tag + scripts.QueueSuffix, tag + scripts.WaitSuffix}
	attempt := func() {
		t.Helper()
		res, err := scripts.Acquire.Run(ctx, admin, keys, "ghost-attempt", "10000", "0", "w1").Slice()
		require.NoError(t, err)
		require.EqualValues(t, int64(scripts.ReplyTaken), res[0], "the waiting writer's attempt is refused: %v", res)
	}
	attempt() // the writer waits: entered in the queue
	n, err := queuedWriters(admin, tag+scripts.QueueSuffix)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "writers queued after the first attempt")
	engine.Unwait(ctx, lk.c.Pool, engine.Withdrawal{Tag: tag, ID: "w1", Channel: engine.ReleaseChannel(tag), Timeout: time.Second})
	attempt() // its call gave up; this attempt was on its way
	n, err = queuedWriters(admin, tag+scripts.QueueSuffix)
	require.NoError(t, err)
	assert.Zero(t, n, "writers queued after the withdrawal and a late attempt")
	require.NoError(t, holder.Unlock(ctx))
	l, err := other.TryLock(ctx, "ghost")
	require.NoError(t, err, "TryLock right after the release (the name is %q)", get(t, admin, tag))
	require.NoError(t, l.Unlock(ctx))
}

// TestWaitersKeepNothingOfUncontendedNames: a name locked and released
// with nobody waiting leaves no record with the waiters (the release
// counts of the channels a Lock call may compare, passes nobody here
// claimed, firm holders), for every kind of hold, on a Locker and on a
// Redlock; a contended name's record lives while its channel is
// subscribed and goes with it (IdleGrace after the last waiter), also on a
// Ring, whose per-channel connections confirm no UNSUBSCRIBE. Every own
// release used to leave a count per name, for good; on a Ring or Cluster a
// contended name's record stayed, and its channel read as heard, after its
// connection was closed.
func TestWaitersKeepNothingOfUncontendedNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("locker", func(t *testing.T) {
		t.Parallel()
		lk := newLocker(t, redistest.Start(t).Client(t))
		for _, k := range holdKinds {
			for i := range 100 {
				l, err := k.hold(ctx, lk, fmt.Sprintf("once-%s-%d", k.name, i))
				require.NoError(t, err)
				require.NoError(t, l.Unlock(ctx))
			}
		}
		for i := range 100 {
			l, err := lk.Lock(ctx, fmt.Sprintf("once-waitable-%d", i))
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))
		}
		assert.Zero(t, lk.c.Waits.Channels(), "records after 500 uncontended holds released")

		contendedRecordGoes(t, lk)
	})
	t.Run("ring", func(t *testing.T) {
		// On a Ring each channel has a connection of its own, closed
		// rather than unsubscribed: no UNSUBSCRIBE confirmation comes.
		t.Parallel()
		r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": redistest.Start(t).Addr()}})
		t.Cleanup(func() { r.Close() })
		contendedRecordGoes(t, newLocker(t, r))
	})
	t.Run("redlock", func(t *testing.T) {
		t.Parallel()
		r := newRL(t, startRLNodes(t, 3, false, time.Second))
		for i := range 200 {
			l, err := r.Lock(ctx, fmt.Sprintf("once-%d", i))
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))
		}
		assert.Zero(t, r.c.Waits.Channels(), "records after 200 uncontended locks released")
	})
}

// contendedRecordGoes: a name one Lock call waited for is recorded while
// its channel is subscribed, and the record, and the channel's being
// heard, go IdleGrace after the last waiter.
func contendedRecordGoes(t *testing.T, lk *Locker) {
	t.Helper()
	ctx := context.Background()
	ch := "{redlock:contended}" + scripts.ChannelSuffix
	held, err := lk.Lock(ctx, "contended")
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		l, err := lk.Lock(ctx, "contended")
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	require.Eventually(t, func() bool { return lk.c.Waits.Busy(engine.QueueKey(ch, "")) },
		5*time.Second, time.Millisecond, "the second Lock call waits")
	require.NoError(t, held.Unlock(ctx))
	require.NoError(t, <-got)
	assert.Positive(t, lk.c.Waits.Channels(), "the contended name's record while its channel is subscribed")
	require.Eventually(t, func() bool { return lk.c.Waits.Channels() == 0 && !lk.c.Waits.PS.Listening(ch) },
		engine.IdleGrace+5*time.Second, 10*time.Millisecond,
		"the contended name's record and its channel's being heard, %v after its last waiter", engine.IdleGrace)
}
