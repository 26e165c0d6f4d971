package engine

// The local queue's side of a hand-off (handoff.go): an Unlock of this core
// reserves the first live waiter of the name, then delivers the lock to it,
// or unreserves it when it could not.

// reserveHead picks the first live waiter of channel for a hand-off by an
// Unlock of this core, passing over those whose caller gave up (they are on
// their way out of the queue); nil when nobody live waits or that waiter is
// already being handed a lock or attempting.
func (ws *waiters) reserveHead(channel string) *waiter {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	if q := ws.Queues[channel]; q != nil {
		return q.reserveHead()
	}
	return nil
}

// reserveHead marks q's first live waiter reserved for a hand-off and
// returns it; nil when that waiter is already reserved or attempting, or
// when q handed off maxHandOffs times in a row, which starts the count
// again (ws.mu held).
func (q *waitQueue) reserveHead() *waiter {
	w := q.firstLive()
	if w == nil || w.reserved || w.attempting {
		return nil
	}
	if q.handOffs >= maxHandOffs {
		// Release this time, so that waiters of other processes, which
		// never see a hand-off, get a turn.
		q.handOffs = 0
		return nil
	}
	q.handOffs++
	w.reserved = true
	return w
}

// firstLive is the first waiter of q whose caller still wants the lock, or
// nil (ws.mu held).
func (q *waitQueue) firstLive() *waiter {
	for _, w := range q.List {
		if !w.givenUp() {
			return w
		}
	}
	return nil
}

// givenUp reports that w's caller no longer wants the lock (ws.mu held).
func (w *waiter) givenUp() bool {
	if w.left {
		return true
	}
	select {
	case <-w.gone:
		return true
	default:
		return false
	}
}

// maxHandOffs bounds how many Unlocks in a row hand a name to a waiter of
// the same core. A process whose goroutines keep the local queue full would
// otherwise never free the name, and other processes would wait forever.
const maxHandOffs = 8

// deliver gives w the lock handed to it, unless w's caller gave up
// meanwhile (its ctx ended): then it reports false and the caller must
// release l, which hands it to the next live waiter.
func (ws *waiters) deliver(w *waiter, l *Hold) bool {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	w.reserved = false
	if w.givenUp() {
		return false
	}
	// Never blocks: handed is buffered 1, and a waiter is handed at most
	// one lock before it leaves (the name stays held by that lock until
	// its owner, this waiter, has returned it from Lock).
	w.Handed <- l
	return true
}

// unreserve ends a hand-off that gave w nothing. With wake (the name may be
// free) the head of the queue tries at once: w, or the waiter after it if w
// left meanwhile.
func (ws *waiters) unreserve(channel string, w *waiter, wake bool) {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	w.reserved = false
	if !wake {
		return
	}
	if !w.givenUp() {
		notify(w)
		return
	}
	if q := ws.Queues[channel]; q != nil {
		if x := q.firstLive(); x != nil {
			notify(x)
		}
	}
}
