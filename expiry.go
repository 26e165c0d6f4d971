package redlock

import (
	"container/heap"
	"sync"
	"time"
)

// expiry is a core's loss clock: ONE goroutine and one timer close the Done
// channel of every held lock whose validity runs out without a renewal. A
// runtime timer per lock would do the same, but with 20,000 locks on a hung
// server their callbacks all fire at once and contend for the core's
// mutexes, closing the last Done tens of milliseconds after its Until; this
// loop closes every due lock's Done first and does the bookkeeping after.
type expiry struct {
	mu    sync.Mutex
	queue expQueue
	wake  chan struct{}
	quit  chan struct{}
	done  chan struct{}
	next  time.Time // when the loop's timer fires; zero while it is busy
}

// timerLead is how long before Until a lock is declared lost, so that Done
// closes by Until although the loop wakes a little late.
const timerLead = time.Millisecond

func newExpiry() *expiry {
	e := &expiry{wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go e.run()
	return e
}

// set arms (or moves) l's loss at until. Called under l.mu (lock order:
// l.mu, then e.mu).
func (e *expiry) set(l *Lock, until time.Time) {
	at := until.Add(-timerLead)
	e.mu.Lock()
	l.expAt = at
	if l.expIndex >= 0 {
		heap.Fix(&e.queue, l.expIndex)
	} else {
		heap.Push(&e.queue, l)
	}
	early := !e.next.IsZero() && at.Before(e.next)
	e.mu.Unlock()
	if early {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
}

func (e *expiry) remove(l *Lock) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.expIndex >= 0 {
		heap.Remove(&e.queue, l.expIndex)
	}
}

func (e *expiry) stop() {
	close(e.quit)
	<-e.done
}

func (e *expiry) run() {
	defer close(e.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var due []*Lock
	for {
		now := time.Now()
		due = due[:0]
		e.mu.Lock()
		for len(e.queue) > 0 && !e.queue[0].expAt.After(now) {
			due = append(due, heap.Pop(&e.queue).(*Lock))
		}
		if len(e.queue) > 0 {
			e.next = e.queue[0].expAt
		} else {
			e.next = farFuture
		}
		if len(due) > 0 {
			e.next = time.Time{}
		}
		e.mu.Unlock()
		if len(due) > 0 {
			// Close every Done first: other owners may be granted the names
			// soon; logging and the registry can wait a few microseconds.
			lost := due[:0]
			for _, l := range due {
				if l.expireLocked() {
					lost = append(lost, l)
				}
			}
			for _, l := range lost {
				l.afterTransition(stateLost)
			}
			continue
		}
		t.Reset(time.Until(e.next))
		select {
		case <-e.quit:
			return
		case <-e.wake:
		case <-t.C:
		}
	}
}

// expQueue is a min-heap of locks by the moment they are lost.
type expQueue []*Lock

func (q expQueue) Len() int           { return len(q) }
func (q expQueue) Less(i, j int) bool { return q[i].expAt.Before(q[j].expAt) }
func (q expQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].expIndex = i
	q[j].expIndex = j
}
func (q *expQueue) Push(x any) {
	l := x.(*Lock)
	l.expIndex = len(*q)
	*q = append(*q, l)
}
func (q *expQueue) Pop() any {
	old := *q
	l := old[len(old)-1]
	old[len(old)-1] = nil
	l.expIndex = -1
	*q = old[:len(old)-1]
	return l
}
