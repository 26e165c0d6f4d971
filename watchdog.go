package redlock

import (
	"container/heap"
	"context"
	"log/slog"
	"sync"
	"time"
)

// watchdog renews every auto-renewed lock of one core from ONE goroutine. A
// held lock costs a heap entry and a timer, not a goroutine: locks that come
// due together are renewed together, through one pipeline per node (go-redis
// splits a Cluster pipeline per shard). Loss is not the watchdog's job: the
// loss clock (expiry, below) closes Done at Until whatever a hung renewal is
// doing.
type watchdog struct {
	c     *core
	mu    sync.Mutex
	queue timeHeap
	// lookAt is when the scheduler next looks at the queue, the time its
	// timer is set for; the zero time means it is busy and looks again at
	// once. Both are changed under mu only. schedule moves the timer earlier
	// for a renewal due before lookAt, without waking the scheduler: taking
	// a lock never costs a goroutine switch.
	lookAt time.Time
	timer  *time.Timer
	quit   chan struct{}
	// ctx is cancelled by stop, so that a renewal running inline (a client
	// with ContextTimeoutEnabled) does not hold Close up.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

func newWatchdog(c *core) *watchdog {
	w := &watchdog{
		c:     c,
		timer: time.NewTimer(time.Hour),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.queue.slot = func(l *Lock) *slot { return &l.renewal }
	go w.run()
	return w
}

// renewEvery is the watchdog period for the current lease: the renew
// interval (TTL/3 by default), but never more than half the lease's
// validity, so that a renewal, and a retry of it, always fit before Until
// even after an Extend to a TTL shorter than the configured interval.
func renewEvery(l *Lock) time.Duration {
	ttl := l.leaseTTL()
	every := ttl / 3
	if l.renewInterval > 0 {
		every = l.renewInterval
	}
	return max(min(every, (ttl-drift(ttl, l.driftFactor))/2), time.Millisecond)
}

// renewAt is when the watchdog should next renew a lease sent at t1.
func renewAt(l *Lock, t1 time.Time) time.Time { return t1.Add(renewEvery(l)) }

// schedule (re)queues l for renewal at at, unless it is no longer held. The
// held check runs under w.mu, and a lock leaves the held state before it
// calls remove, so a released lock is never left in the queue.
func (w *watchdog) schedule(l *Lock, at time.Time) {
	w.mu.Lock()
	if !l.is(stateHeld) {
		w.mu.Unlock()
		return
	}
	w.queue.set(l, at)
	if !w.lookAt.IsZero() && at.Before(w.lookAt) {
		w.lookAt = at
		w.timer.Reset(time.Until(at))
	}
	w.mu.Unlock()
}

func (w *watchdog) remove(l *Lock) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.queue.remove(l)
}

func (w *watchdog) stop() {
	w.cancel()
	close(w.quit)
	<-w.done
}

func (w *watchdog) run() {
	defer close(w.done)
	defer w.timer.Stop()
	for {
		due := w.due(time.Now())
		if len(due) > 0 {
			w.renew(due)
			continue
		}
		select {
		case <-w.quit:
			return
		case <-w.timer.C:
		}
	}
}

// due pops the locks whose renewal time has come, skipping those a manual
// Extend is renewing right now (they are requeued shortly after). Locks due
// within an eighth of their renew interval ride along: renewing a little
// early costs nothing, and it lets locks taken at scattered moments share a
// pipeline instead of each costing a round trip of its own. It sets the
// timer for the next look when nothing is due.
func (w *watchdog) due(now time.Time) []*Lock {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out, busy []*Lock
	for {
		head, at, ok := w.queue.head()
		if !ok || at.After(now.Add(renewEvery(head)/8)) {
			break
		}
		w.queue.pop()
		if l := head; l.io.TryLock() {
			out = append(out, l)
		} else {
			busy = append(busy, l)
		}
	}
	for _, l := range busy {
		// Past the ride-along window, so the next pass does not pop it again
		// at once while the Extend holding it is still on the wire.
		w.queue.set(l, now.Add(renewEvery(l)/8+time.Millisecond))
	}
	_, at, queued := w.queue.head()
	switch {
	case len(out) > 0:
		w.lookAt = time.Time{} // busy renewing; looks again right after
	case queued:
		w.lookAt = at
		w.timer.Reset(time.Until(at))
	default:
		w.lookAt = farFuture
		w.timer.Stop()
	}
	return out
}

// renew extends every lock in due on every node, one pipeline per node, and
// applies the Redlock rule to each lock as soon as its own outcome is
// settled: renewed iff a quorum extended and the new validity, measured
// from before the send, is still ahead. The scheduler waits only until
// every lock is settled or a quorum of nodes has answered the whole batch;
// locks still waiting for a slow minority are settled by the round's own
// goroutine, so a hung master never holds back another lock's renewal.
func (w *watchdog) renew(due []*Lock) {
	c := w.c
	ttls := make([]time.Duration, len(due))
	deadline := time.Time{}
	for i, l := range due {
		ttls[i] = l.leaseTTL()
		if u := l.Until(); deadline.IsZero() || u.Before(deadline) {
			deadline = u
		}
	}
	t1 := time.Now()
	// Wait for replies until the first of these locks would be lost anyway,
	// but give a slow pipeline at least one node timeout.
	deadline = latest(deadline, t1.Add(due[0].timeout))
	settle := func(i int, r batchResult) {
		if r.partial {
			// Still waiting for a slow node: what a loss by time reports.
			due[i].renewFailed(r.err, r.no > 0)
			return
		}
		c.track.settle(due[i], true)
		if w.apply(due[i], ttls[i], t1, r) {
			c.repairRenewed(due[i], ttls[i], t1)
		}
		due[i].io.Unlock()
	}
	var gone func(int, *node)
	if len(c.pool.nodes) > 1 {
		gone = func(i int, n *node) { c.foundGone(due[i], n, ttls[i], t1) }
	}
	if !c.life.goCount(1) {
		for _, l := range due {
			l.io.Unlock()
		}
		return
	}
	// On a node whose tracking data connection is up, the renewals run
	// there: silent (NOLOOP), so no credit, and they keep their keys armed.
	via, credit := c.track.routes()
	for _, l := range due {
		c.track.expectOn(l, credit)
	}
	moveOn := make(chan struct{})
	go func() {
		defer c.life.wg.Done()
		c.pool.batch(w.ctx, due, ttls, deadline, w.quit, settle, moveOn, gone, via)
	}()
	select {
	case <-moveOn:
	case <-w.quit:
	}
}

// apply records one lock's renewal outcome r, for a lease of ttl sent at t1,
// and reports whether it renewed the lock. A lock that ends up lost
// although some nodes moved its lease (lost while the renewal was on the
// wire, or refused by too many others) is released there: the moved
// leases must not keep the name.
func (w *watchdog) apply(l *Lock, ttl time.Duration, t1 time.Time, r batchResult) (renewed bool) {
	c := w.c
	if r.ok > 0 {
		defer func() {
			if l.is(stateLost) {
				c.abandon(l)
			}
		}()
	}
	now := time.Now()
	until := validUntil(t1, ttl, l.driftFactor)
	switch {
	case r.ok >= c.pool.quorum && now.Before(until):
		if renewed = c.renewed(l, ttl, until); renewed {
			w.schedule(l, renewAt(l, t1))
		}
		if l.obs != nil {
			observeRenew(l, false, ttl, t1, l.Err(), r.err)
		}
	case c.pool.impossible(r.no):
		reason := refusalReason(r.no, r.taken, r.late)
		if l.obs != nil {
			observeRenew(l, false, ttl, t1, reason, r.err)
		}
		l.lose(reason, r.err)
	default:
		if l.obs != nil {
			observeRenew(l, false, ttl, t1, r.err, r.err)
		}
		if !l.is(stateHeld) {
			return false
		}
		l.renewFailed(r.err, r.no > 0)
		if r.interrupted {
			return false // Close: the lock is being released
		}
		if l.logger.Enabled(context.Background(), slog.LevelWarn) {
			l.logger.Warn("redlock: renewal failed, retrying", "name", l.name, "extended", r.ok, "nodes", len(c.pool.nodes), "err", r.err)
		}
		// Retry soon; the loss clock fires at Until if this keeps failing.
		w.schedule(l, now.Add(max(renewEvery(l)/4, time.Millisecond)))
	}
	return renewed
}

// slot is a lock's place in one timeHeap: when it is due there, and at which
// index it sits (-1 when not queued). Each heap's mutex guards its slots.
type slot struct {
	at    time.Time
	index int
}

// timeHeap is a min-heap of locks by the time in one of their slots: the
// watchdog's renewals, the loss clock's expiries. A lock is queued at most
// once per heap and moves in O(log n).
type timeHeap struct {
	locks []*Lock
	slot  func(*Lock) *slot
}

func (h *timeHeap) Len() int           { return len(h.locks) }
func (h *timeHeap) Less(i, j int) bool { return h.slot(h.locks[i]).at.Before(h.slot(h.locks[j]).at) }
func (h *timeHeap) Swap(i, j int) {
	h.locks[i], h.locks[j] = h.locks[j], h.locks[i]
	h.slot(h.locks[i]).index = i
	h.slot(h.locks[j]).index = j
}
func (h *timeHeap) Push(x any) {
	l := x.(*Lock)
	h.slot(l).index = len(h.locks)
	h.locks = append(h.locks, l)
}
func (h *timeHeap) Pop() any {
	n := len(h.locks) - 1
	l := h.locks[n]
	h.locks[n] = nil
	h.locks = h.locks[:n]
	h.slot(l).index = -1
	return l
}

// set queues l at at, or moves it there.
func (h *timeHeap) set(l *Lock, at time.Time) {
	s := h.slot(l)
	s.at = at
	if s.index >= 0 {
		heap.Fix(h, s.index)
	} else {
		heap.Push(h, l)
	}
}

func (h *timeHeap) remove(l *Lock) {
	if s := h.slot(l); s.index >= 0 {
		heap.Remove(h, s.index)
	}
}

// countBy counts the locks queued at or before horizon, walking only the
// part of the heap they occupy (with its boundary).
func (h *timeHeap) countBy(horizon time.Time) int {
	n := 0
	var buf [64]int
	stack := append(buf[:0], 0)
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if i >= len(h.locks) || h.slot(h.locks[i]).at.After(horizon) {
			continue
		}
		n++
		stack = append(stack, 2*i+1, 2*i+2)
	}
	return n
}

// head returns the earliest lock and its time; ok is false when empty.
func (h *timeHeap) head() (l *Lock, at time.Time, ok bool) {
	if len(h.locks) == 0 {
		return nil, time.Time{}, false
	}
	return h.locks[0], h.slot(h.locks[0]).at, true
}

func (h *timeHeap) pop() *Lock { return heap.Pop(h).(*Lock) }

// farFuture stands for "nothing planned": any earlier time wakes a loop
// waiting on a timeHeap.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// expiry is a core's loss clock: ONE goroutine and one timer close the Done
// channel of every held lock whose validity runs out without a renewal. A
// runtime timer per lock would do the same, but with 20,000 locks on a hung
// server their callbacks all fire at once and contend for the core's
// mutexes, closing the last Done tens of milliseconds after its Until; this
// loop closes every due lock's Done and hands the bookkeeping (the registry,
// the log, Do's callbacks) to a second goroutine, books: that takes the
// core's and the watchdog's mutexes, which a renewal round of thousands of
// locks holds for milliseconds at a time, and the loop must not wait for
// them while other locks come due.
type expiry struct {
	mu    sync.Mutex
	queue timeHeap
	quit  chan struct{}
	done  chan struct{}
	// lost holds the locks declared lost whose bookkeeping books has not
	// done yet (under mu); wake tells books there are some.
	lost []*Lock
	wake chan struct{}
	// next is when the loop's timer fires, zero while the loop is busy, and
	// early how long before the head's mark that is. set moves the timer
	// earlier for a lock due before next itself, under mu, without waking
	// the loop: taking a lock costs no goroutine switch.
	next  time.Time
	early time.Duration
	timer *time.Timer
	// cost is what declaring one lock lost took, on average (owned by run):
	// locks due together are declared lost that much earlier per lock, so
	// the last of a batch of thousands (renewed together, due together)
	// still closes Done by its Until.
	cost time.Duration
}

func newExpiry() *expiry {
	e := &expiry{timer: time.NewTimer(time.Hour), quit: make(chan struct{}), done: make(chan struct{}), wake: make(chan struct{}, 1), cost: calibrate()}
	e.queue.slot = func(l *Lock) *slot { return &l.loss }
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		e.run()
	}()
	go func() {
		defer close(e.done)
		e.books(ran)
	}()
	return e
}

// calibrate measures what declaring a lock lost costs on this machine and
// build (the race detector makes it ten times dearer), so that the first
// batch of losses is not late for want of an estimate.
func calibrate() time.Duration {
	const n = 32
	locks := make([]Lock, n)
	past := time.Now().Add(-time.Second)
	for i := range locks {
		locks[i] = Lock{state: stateHeld, until: past, done: make(chan struct{})}
	}
	start := time.Now()
	for i := range locks {
		locks[i].expireLocked(0)
	}
	return max(time.Since(start)/n, 100*time.Nanosecond)
}

// set arms (or moves) l's loss to at.
func (e *expiry) set(l *Lock, at time.Time) {
	e.mu.Lock()
	e.queue.set(l, at)
	if mark := at.Add(-e.early); !e.next.IsZero() && mark.Before(e.next) {
		e.next = mark
		e.timer.Reset(time.Until(mark))
	}
	e.mu.Unlock()
}

func (e *expiry) remove(l *Lock) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.queue.remove(l)
}

func (e *expiry) stop() {
	close(e.quit)
	<-e.done
}

func (e *expiry) run() {
	defer e.timer.Stop()
	var due []*Lock
	var dueAt []time.Time  // the marks of due
	var lead time.Duration // how much earlier a batch starts, for its size
	// slack is how much earlier still, learnt from batches that closed a
	// Done after its mark: on a loaded machine the loop wakes late and runs
	// slowly, and the next batch starts earlier by what the last one missed.
	var slack time.Duration
	for {
		due, dueAt, lead = e.take(due[:0], dueAt[:0], lead, slack)
		if len(due) > 0 {
			// Close every Done first: other owners may be granted the names
			// soon.
			if over := e.expire(due, dueAt, lead+slack); over > 0 {
				slack = min(slack+over, maxSlack)
			} else {
				slack -= slack / 16
			}
			continue
		}
		select {
		case <-e.quit:
			return
		case <-e.timer.C:
		}
	}
}

// books does the bookkeeping of the locks the loop declared lost, in the
// order it declared them, until the loop has returned (ran closed) and
// nothing is left.
func (e *expiry) books(ran <-chan struct{}) {
	var batch []*Lock
	for {
		select {
		case <-e.wake:
		case <-ran:
		}
		e.mu.Lock()
		batch, e.lost = e.lost, batch[:0]
		e.mu.Unlock()
		for i, l := range batch {
			l.eng.ended(l, stateLost)
			batch[i] = nil
		}
		select {
		case <-ran:
			e.mu.Lock()
			left := len(e.lost)
			e.mu.Unlock()
			if left == 0 {
				return
			}
		default:
		}
	}
}

// take pops the locks due within lead+slack into due (their marks into
// dueAt). With none due, it sets the timer for the next one, early by the
// time the locks due with it will take to declare lost, and returns that new
// lead.
func (e *expiry) take(due []*Lock, dueAt []time.Time, lead, slack time.Duration) ([]*Lock, []time.Time, time.Duration) {
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		_, at, ok := e.queue.head()
		if !ok || at.After(now.Add(lead+slack)) {
			break
		}
		due = append(due, e.queue.pop())
		dueAt = append(dueAt, at)
	}
	if len(due) > 0 {
		e.next = time.Time{}
		return due, dueAt, lead
	}
	lead = 2 * e.cost * time.Duration(e.dueWith())
	e.early = lead + slack
	e.next = farFuture
	if _, at, ok := e.queue.head(); ok {
		e.next = at.Add(-e.early)
	}
	e.timer.Reset(time.Until(e.next))
	return due, dueAt, lead
}

// expire declares the due locks lost (those still held and due by extra),
// closing their Done, and hands them to books for the bookkeeping. It
// returns how late the latest Done closed after its mark, and learns what
// declaring one lock lost costs.
func (e *expiry) expire(due []*Lock, dueAt []time.Time, extra time.Duration) time.Duration {
	start := time.Now()
	var over time.Duration
	lost := 0
	for i, l := range due {
		gone, rearm := l.expireLocked(extra)
		if !rearm.IsZero() {
			e.set(l, rearm)
		}
		if gone {
			due[lost] = l
			lost++
			over = max(over, time.Since(dueAt[i]))
		}
	}
	e.cost = (e.cost*3 + time.Since(start)/time.Duration(len(due))) / 4
	if lost > 0 {
		e.mu.Lock()
		e.lost = append(e.lost, due[:lost]...)
		e.mu.Unlock()
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
	return over
}

// maxSlack caps the loss clock's learnt slack. Each lock takes at most an
// eighth of its TTL of it (see Lock.expireLocked).
const maxSlack = 250 * time.Millisecond

// dueWith counts the locks due within timerLead of the first one (e.mu
// held). Those form a subtree at the heap's root (no lock is due before its
// parent), so the walk visits them and their children only: it runs on every
// wake, and scanning all 20,000 locks of a hung server at each of the
// hundreds of wakes their spread-out marks cause kept the loop busy enough
// to close Done late.
func (e *expiry) dueWith() int {
	_, first, ok := e.queue.head()
	if !ok {
		return 0
	}
	return e.queue.countBy(first.Add(timerLead))
}
