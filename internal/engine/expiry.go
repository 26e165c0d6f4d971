package engine

import (
	"sync"
	"sync/atomic"
	"time"
)

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
	queue TimeHeap
	quit  chan struct{}
	done  chan struct{}
	// lost holds the locks declared lost whose bookkeeping books has not
	// done yet (under mu); wake tells books there are some.
	lost []*Hold
	wake chan struct{}
	// next is when the loop's timer fires, zero while the loop is busy, and
	// early how long before the head's mark that is. set moves the timer
	// earlier for a lock due before next itself, under mu, without waking
	// the loop: taking a lock costs no goroutine switch.
	next  time.Time
	early time.Duration
	timer *time.Timer
	// target is when the timer is set to fire, as time since base; woke the
	// most a wake of the loop came after it (its own scheduling delay, a
	// measure of the machine: a test's allowance, see TestLossClockScales).
	base         time.Time
	target, Woke atomic.Int64
	// cost is what declaring one lock lost took, on average (owned by run):
	// locks due together are declared lost that much earlier per lock, so
	// the last of a batch of thousands (renewed together, due together)
	// still closes Done by its Until.
	cost time.Duration
	// BeforeExpire, when set (by tests, before the first lock), is called
	// by the loop before it declares a batch of due locks lost, outside mu:
	// a test stalls the loss clock with it, to see what Err says when the
	// clock is late.
	BeforeExpire func()
}

func newExpiry() *expiry {
	e := &expiry{timer: time.NewTimer(time.Hour), base: time.Now(), quit: make(chan struct{}), done: make(chan struct{}), wake: make(chan struct{}, 1), cost: calibrate()}
	e.queue.Slot = func(l *Hold) *Slot { return &l.Loss }
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
	locks := make([]Hold, n)
	past := time.Now().Add(-time.Second)
	for i := range locks {
		locks[i] = Hold{status: status{state: stateHeld, done: make(chan struct{})}, lease: lease{Until: past}}
	}
	start := time.Now()
	for i := range locks {
		locks[i].expireLocked(0)
	}
	return max(time.Since(start)/n, 100*time.Nanosecond)
}

// set arms (or moves) l's loss to at.
func (e *expiry) set(l *Hold, at time.Time) {
	e.mu.Lock()
	e.queue.Set(l, at)
	if mark := at.Add(-e.early); !e.next.IsZero() && mark.Before(e.next) {
		e.next = mark
		e.reset(mark)
	}
	e.mu.Unlock()
}

// reset sets the timer to fire at at (e.mu held).
func (e *expiry) reset(at time.Time) {
	e.target.Store(int64(at.Sub(e.base)))
	e.timer.Reset(time.Until(at))
}

func (e *expiry) remove(l *Hold) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.queue.Remove(l)
}

func (e *expiry) stop() {
	close(e.quit)
	<-e.done
}

func (e *expiry) run() {
	defer e.timer.Stop()
	var due []*Hold
	var dueAt []time.Time  // the marks of due
	var lead time.Duration // how much earlier a batch starts, for its size
	// slack is how much earlier still, learnt from batches that closed a
	// Done after its mark: on a loaded machine the loop wakes late and runs
	// slowly, and the next batch starts earlier by what the last one missed.
	// It is kept for slackHold after the last late batch before it decays:
	// decaying at every batch, it was gone again within a few dozen batches
	// (locks due a millisecond apart) while the machine still woke the loop
	// late every few hundred milliseconds.
	var slack time.Duration
	var lateAt time.Time
	for {
		began := time.Now()
		due, dueAt, lead = e.take(due[:0], dueAt[:0], lead, slack)
		if len(due) > 0 {
			if e.BeforeExpire != nil {
				e.BeforeExpire()
			}
			// Close every Done first: other owners may be granted the names
			// soon.
			if over := e.expire(due, dueAt, lead+slack, began); over > 0 {
				slack, lateAt = min(slack+over, maxSlack), time.Now()
			} else if time.Since(lateAt) > slackHold {
				slack -= slack / 16
			}
			continue
		}
		select {
		case <-e.quit:
			return
		case <-e.timer.C:
			if late := time.Since(e.base) - time.Duration(e.target.Load()); late > time.Duration(e.Woke.Load()) {
				e.Woke.Store(int64(late))
			}
		}
	}
}

// books does the bookkeeping of the locks the loop declared lost, in the
// order it declared them, until the loop has returned (ran closed) and
// nothing is left.
func (e *expiry) books(ran <-chan struct{}) {
	var batch []*Hold
	for {
		select {
		case <-e.wake:
		case <-ran:
		}
		e.mu.Lock()
		batch, e.lost = e.lost, batch[:0]
		e.mu.Unlock()
		for i, l := range batch {
			l.Eng.ended(l, stateLost)
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

// takeChunk is how many due locks take pops at a time. Thousands can be due
// together (renewed in one round, due in one), and popping them all before
// declaring the first lost made the first wait for the last: under -race a
// pop from a heap of 20,000 scattered locks costs up to 90µs, and a batch of
// 3,201 closed its first Done 287ms after its mark.
const takeChunk = 128

// take pops the locks due within lead+slack into due (their marks into
// dueAt), at most takeChunk of them. With none due, it sets the timer for
// the next one, early by the time the locks due with it will take to
// declare lost, and returns that new lead.
func (e *expiry) take(due []*Hold, dueAt []time.Time, lead, slack time.Duration) ([]*Hold, []time.Time, time.Duration) {
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	for len(due) < takeChunk {
		_, at, ok := e.queue.Head()
		if !ok || at.After(now.Add(lead+slack)) {
			break
		}
		due = append(due, e.queue.PopHead())
		dueAt = append(dueAt, at)
	}
	if len(due) > 0 {
		e.next = time.Time{}
		return due, dueAt, lead
	}
	lead = 2 * e.cost * time.Duration(e.dueWith())
	e.early = lead + slack
	e.next = farFuture
	if _, at, ok := e.queue.Head(); ok {
		e.next = at.Add(-e.early)
	}
	e.reset(e.next)
	return due, dueAt, lead
}

// expire declares the due locks lost (those still held and due by extra),
// closing their Done, and hands them to books for the bookkeeping. It
// returns how late the latest Done closed after its mark, and learns what
// taking (since start) and declaring one lock lost costs.
func (e *expiry) expire(due []*Hold, dueAt []time.Time, extra time.Duration, start time.Time) time.Duration {
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

// dueWith counts the locks due within TimerLead of the first one (e.mu
// held). Those form a subtree at the heap's root (no lock is due before its
// parent), so the walk visits them and their children only: it runs on every
// wake, and scanning all 20,000 locks of a hung server at each of the
// hundreds of wakes their spread-out marks cause kept the loop busy enough
// to close Done late.
func (e *expiry) dueWith() int {
	_, first, ok := e.queue.Head()
	if !ok {
		return 0
	}
	return e.queue.CountBy(first.Add(TimerLead))
}
