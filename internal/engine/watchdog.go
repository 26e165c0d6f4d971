package engine

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redlockgo/redlock/internal/node"
)

// watchdog renews every auto-renewed lock of one core from ONE goroutine. A
// held lock costs a heap entry and a timer, not a goroutine: locks that come
// due together are renewed together, through one pipeline per node (go-redis
// splits a Cluster pipeline per shard). Loss is not the watchdog's job: the
// loss clock (expiry, below) closes Done at Until whatever a hung renewal is
// doing.
type watchdog struct {
	c     *Core
	mu    sync.Mutex
	queue TimeHeap
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

func newWatchdog(c *Core) *watchdog {
	w := &watchdog{
		c:     c,
		timer: time.NewTimer(time.Hour),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.queue.Slot = func(l *Hold) *Slot { return &l.renewal }
	go w.run()
	return w
}

// renewEvery is the watchdog period for the current lease: the renew
// interval (TTL/3 by default), but never more than half the lease's
// validity, so that a renewal, and a retry of it, always fit before Until
// even after an Extend to a TTL shorter than the configured interval.
func renewEvery(l *Hold) time.Duration {
	ttl := l.leaseTTL()
	every := ttl / 3
	if l.renewInterval > 0 {
		every = l.renewInterval
	}
	return max(min(every, (ttl-Drift(ttl, l.driftFactor))/2), time.Millisecond)
}

// renewAt is when the watchdog should next renew a lease sent at t1.
func renewAt(l *Hold, t1 time.Time) time.Time { return t1.Add(renewEvery(l)) }

// schedule (re)queues l for renewal at at, unless it is no longer held. The
// held check runs under w.mu, and a lock leaves the held state before it
// calls remove, so a released lock is never left in the queue.
func (w *watchdog) schedule(l *Hold, at time.Time) {
	w.mu.Lock()
	if !l.is(stateHeld) {
		w.mu.Unlock()
		return
	}
	w.queue.Set(l, at)
	if !w.lookAt.IsZero() && at.Before(w.lookAt) {
		w.lookAt = at
		w.timer.Reset(time.Until(at))
	}
	w.mu.Unlock()
}

func (w *watchdog) remove(l *Hold) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.queue.Remove(l)
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
func (w *watchdog) due(now time.Time) []*Hold {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out, busy []*Hold
	for {
		head, at, ok := w.queue.Head()
		if !ok || at.After(now.Add(renewEvery(head)/8)) {
			break
		}
		w.queue.PopHead()
		if l := head; l.IO.TryLock() {
			out = append(out, l)
		} else {
			busy = append(busy, l)
		}
	}
	for _, l := range busy {
		// Past the ride-along window, so the next pass does not pop it again
		// at once while the Extend holding it is still on the wire.
		w.queue.Set(l, now.Add(renewEvery(l)/8+time.Millisecond))
	}
	_, at, queued := w.queue.Head()
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
func (w *watchdog) renew(due []*Hold) {
	c := w.c
	ttls := make([]time.Duration, len(due))
	deadline := time.Time{}
	for i, l := range due {
		ttls[i] = l.leaseTTL()
		if u := l.LockedUntil(); deadline.IsZero() || u.Before(deadline) {
			deadline = u
		}
	}
	t1 := time.Now()
	// Wait for replies until the first of these locks would be lost anyway,
	// but give a slow pipeline at least one node timeout.
	deadline = latest(deadline, t1.Add(due[0].timeout))
	// credit is the renewals' credits for the loss tracker (set below).
	var credit uint64
	settle := func(i int, r batchResult) {
		if r.partial {
			// Still waiting for a slow node: what a loss by time reports.
			due[i].renewFailed(r.err, r.no > 0)
			return
		}
		if credit != 0 {
			c.Track.settle(due[i], true)
		}
		if w.apply(due[i], ttls[i], t1, r) {
			w.repairRenewed(due[i], ttls[i], t1)
		}
		due[i].IO.Unlock()
	}
	var gone func(int, *node.Node)
	if len(c.Pool.Nodes) > 1 {
		gone = func(i int, n *node.Node) { w.foundGone(due[i], n, ttls[i], t1) }
	}
	if !c.Life.GoCount(1) {
		for _, l := range due {
			l.IO.Unlock()
		}
		return
	}
	// On a node whose tracking data connection is up, the renewals run
	// there: silent (NOLOOP), so no credit, and they keep their keys armed.
	// Renewals that need no credit on any node are not announced to the
	// tracker at all: their settle would restart the lapse of the credits
	// of the lock's earlier writes, and a credit whose invalidation never
	// comes (the acquisition of a key nobody tracked yet) would absorb an
	// outside change for as long as the lock is renewed, instead of
	// lapsing creditFor after that write.
	var via *dataRoutes
	via, credit = c.Track.routes()
	if credit != 0 {
		for _, l := range due {
			c.Track.expectOn(l, credit)
		}
	}
	moveOn := make(chan struct{})
	go func() {
		defer c.Life.WG.Done()
		c.Pool.batch(w.ctx, due, ttls, deadline, w.quit, settle, moveOn, gone, via)
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
func (w *watchdog) apply(l *Hold, ttl time.Duration, t1 time.Time, r batchResult) (renewed bool) {
	c := w.c
	if r.ok > 0 {
		defer func() {
			if l.is(stateLost) {
				c.Abandon(l)
			}
		}()
	}
	now := time.Now()
	until := ValidUntil(t1, ttl, l.driftFactor)
	switch {
	case r.ok >= c.Pool.Quorum && now.Before(until):
		if renewed = c.renewed(l, ttl, until); renewed {
			w.schedule(l, renewAt(l, t1))
		}
		if l.obs != nil {
			observeRenew(l, false, ttl, t1, l.Err(), r.err)
		}
	case c.Pool.Impossible(r.no):
		reason := refusalReason(r.no, r.taken, r.late)
		if l.obs != nil {
			observeRenew(l, false, ttl, t1, Say.Reason(reason), r.err)
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
			l.logger.Warn("redlock: renewal failed, retrying", "name", l.Name, "extended", r.ok, "nodes", len(c.Pool.Nodes), "err", r.err)
		}
		// Retry soon; the loss clock fires at Until if this keeps failing.
		w.schedule(l, now.Add(max(renewEvery(l)/4, time.Millisecond)))
	}
	return renewed
}

// maxSlack caps the loss clock's learnt slack. Each lock takes at most an
// eighth of its TTL of it (see Lock.expireLocked).
const maxSlack = 250 * time.Millisecond

// slackHold is how long the loss clock keeps the slack it learnt after its
// last late batch before the slack decays.
const slackHold = time.Second
