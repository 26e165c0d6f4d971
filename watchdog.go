package redlock

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// watchdog renews every auto-renewed lock of one core from ONE goroutine. A
// held lock costs a heap entry and a timer, not a goroutine: locks that come
// due together are renewed together, through one pipeline per node (go-redis
// splits a Cluster pipeline per shard). Loss is not the watchdog's job: the
// loss clock (expiry.go) closes Done at Until whatever a hung renewal is
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

// schedule (re)queues l for renewal at at, unless it is no longer held. The
// held check runs under w.mu, and a lock leaves the held state before it
// calls remove, so a released lock is never left in the queue.
func (w *watchdog) schedule(l *Lock, at time.Time) {
	w.mu.Lock()
	if !l.held() {
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
		if !ok || at.After(now.Add(head.renewEvery()/8)) {
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
		w.queue.set(l, now.Add(l.renewEvery()/8+time.Millisecond))
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
		w.apply(due[i], ttls[i], t1, r)
		due[i].io.Unlock()
	}
	if !c.goCount(1) {
		for _, l := range due {
			l.io.Unlock()
		}
		return
	}
	moveOn := make(chan struct{})
	go func() {
		defer c.wg.Done()
		c.batch(w.ctx, due, ttls, deadline, w.quit, settle, moveOn)
	}()
	select {
	case <-moveOn:
	case <-w.quit:
	}
}

// apply records one lock's renewal outcome r, for a lease of ttl sent at t1.
func (w *watchdog) apply(l *Lock, ttl time.Duration, t1 time.Time, r batchResult) {
	c := w.c
	now := time.Now()
	until := validUntil(t1, ttl, l.driftFactor)
	switch {
	case r.ok >= c.quorum && now.Before(until):
		if l.renewed(ttl, until) {
			w.schedule(l, l.renewAt(t1))
		} else if l.isLost() {
			// Lost while the renewal was on the wire (the loss clock got there
			// first): the lease it moved must not keep the name.
			c.abandon(l)
		}
		if l.obs != nil {
			l.observeRenew(false, ttl, t1, l.Err(), r.err)
		}
	case c.impossible(r.no):
		reason := refusalReason(r.no, r.taken, r.late)
		if l.obs != nil {
			l.observeRenew(false, ttl, t1, reason, r.err)
		}
		l.lose(reason, r.err)
		if r.ok > 0 && l.isLost() {
			c.abandon(l) // the masters that moved it must not keep the name
		}
	default:
		if l.obs != nil {
			l.observeRenew(false, ttl, t1, r.err, r.err)
		}
		if !l.held() {
			if r.ok > 0 && l.isLost() {
				c.abandon(l)
			}
			return
		}
		l.renewFailed(r.err, r.no > 0)
		if r.interrupted {
			return // Close: the lock is being released
		}
		if l.logger.Enabled(context.Background(), slog.LevelWarn) {
			l.logger.Warn("redlock: renewal failed, retrying", "name", l.name, "extended", r.ok, "nodes", len(c.nodes), "err", r.err)
		}
		// Retry soon; the loss clock fires at Until if this keeps failing.
		w.schedule(l, now.Add(max(l.renewEvery()/4, time.Millisecond)))
	}
}

// batchResult is the outcome of one pipelined script for one lock over all
// nodes.
type batchResult struct {
	ok, no, failed int
	taken          int // of no: another owner's value, not a missing key
	late           int // of no: the lease was too near its end to move (extend.lua)
	err            error
	interrupted    bool // quit closed before the outcome was settled
	partial        bool // not settled yet: what one node timeout brought
}

// batch runs the extend script (ttls != nil) or the release script (ttls ==
// nil) for every lock on every node, one pipeline per node. settle, when
// not nil, gets each lock's outcome once, as soon as a quorum of yes, or its
// impossibility, decides it, or when the deadline passes or quit closes;
// and, for a lock still open one node timeout after the send, a partial
// outcome then.
// moveOn, when not nil, is closed as soon as every lock is settled or a
// quorum of nodes has answered: what is left waits for a slow minority. It
// returns every lock's outcome from the replies gathered by the end. A
// renewal skips a node whose previous renewal has not answered yet (counted
// as failed), so a hung node ties up one goroutine, not one per period.
func (c *core) batch(ctx context.Context, locks []*Lock, ttls []time.Duration, deadline time.Time, quit <-chan struct{}, settle func(int, batchResult), moveOn chan struct{}) []batchResult {
	out := make([]batchResult, len(locks))
	moved := false
	letGo := func() {
		if !moved && moveOn != nil {
			moved = true
			close(moveOn)
		}
	}
	defer letGo()
	if len(locks) == 0 {
		return out
	}
	renew := ttls != nil
	nodes := make([]*node, 0, len(c.nodes))
	var skipped []reply
	for _, n := range c.nodes {
		if renew && !n.renewing.CompareAndSwap(false, true) {
			skipped = append(skipped, reply{node: n.idx, err: errNodeBusy})
			continue
		}
		nodes = append(nodes, n)
	}
	rs := skipped
	done := make([]bool, len(locks))
	left := len(locks)
	// decide settles every lock that the replies so far decide (all of them
	// when final), and lets the scheduler go once nothing is left to wait
	// for but a minority.
	decide := func(final, interrupted bool) {
		for i := range locks {
			if done[i] {
				continue
			}
			var res batchResult
			for _, r := range rs {
				c.tallyBatch(&res, r, i, true)
			}
			if !final && res.ok < c.quorum && !c.impossible(res.no+res.failed) {
				continue
			}
			res.interrupted = interrupted
			out[i], done[i] = res, true
			left--
			if settle != nil {
				settle(i, res)
			}
		}
		if answered := len(rs) - len(skipped); left == 0 || answered >= c.quorum || final {
			letGo()
		}
	}
	if len(nodes) == 0 {
		decide(true, false)
		return out
	}
	ch, err := c.fanOut(ctx, nodes, time.Until(deadline), time.Until(deadline), func(ctx context.Context, n *node) reply {
		if renew {
			defer n.renewing.Store(false)
		}
		codes, err := pipelineScript(ctx, n.client, locks, ttls)
		if renew {
			c.releaseLate(ctx, n, locks, codes)
		}
		return reply{codes: codes, err: err}
	})
	if err != nil {
		for _, n := range nodes {
			if renew {
				n.renewing.Store(false)
			}
			rs = append(rs, reply{node: n.idx, err: err})
		}
		decide(true, false)
		return out
	}
	t := getTimer(time.Until(deadline))
	defer putTimer(t)
	var soft <-chan time.Time
	if timeout := locks[0].timeout; settle != nil && time.Until(deadline) > timeout {
		st := getTimer(timeout)
		defer putTimer(st)
		soft = st.C
	}
	for got := 0; got < len(nodes) && left > 0; {
		select {
		case r := <-ch:
			rs = append(rs, r)
			got++
			decide(false, false)
			continue
		case <-soft:
			soft = nil
			for i := range locks {
				if done[i] {
					continue
				}
				res := batchResult{partial: true}
				for _, r := range rs {
					c.tallyBatch(&res, r, i, true)
				}
				for _, n := range nodes {
					if _, ok := replyOf(rs, n.idx); !ok {
						res.err = errors.Join(res.err, c.nodeErr(n.idx, errNodeTimeout))
					}
				}
				settle(i, res)
			}
			continue
		case <-t.C:
			for _, n := range nodes {
				if _, ok := replyOf(rs, n.idx); !ok {
					rs = append(rs, reply{node: n.idx, err: errNodeTimeout})
				}
			}
			decide(true, false)
		case <-quit:
			decide(true, true)
		}
		break
	}
	decide(true, false)
	return out
}

// releaseLate releases, on node n, the locks whose lease n has just moved
// although they stopped being held while the renewal was on the wire (a
// server that answers after a pause runs the renewals queued in its
// sockets): a lock declared lost must not keep its name once the server
// answers again. extend.lua already refuses a lease too near its end, so
// this is the rest: leases moved shortly before the loss was declared.
func (c *core) releaseLate(ctx context.Context, n *node, locks []*Lock, codes []int8) {
	var late []*Lock
	for i, l := range locks {
		if i < len(codes) && codes[i] == 1 && l.isLost() {
			late = append(late, l)
		}
	}
	if len(late) > 0 {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), late[0].timeout)
		defer cancel()
		_, _ = pipelineScript(ctx, n.client, late, nil)
	}
}

// tallyBatch adds node reply r's answer for lock i to res, and its error
// when withErr (the stop function only counts).
func (c *core) tallyBatch(res *batchResult, r reply, i int, withErr bool) {
	switch {
	case r.codes == nil || r.codes[i] < 0 || c.nodes[r.node].isDup():
		res.failed++
		if !withErr {
			return
		}
		err := r.err
		if err == nil {
			err = errDuplicate
		}
		res.err = errors.Join(res.err, c.nodeErr(r.node, err))
	case r.codes[i] == 1:
		res.ok++
	default:
		res.no++
		switch r.codes[i] {
		case extTaken:
			res.taken++
		case extLate:
			res.late++
		}
		if withErr {
			res.err = errors.Join(res.err, c.nodeErr(r.node, refusalOf(int64(r.codes[i]))))
		}
	}
}

// pipelineScript sends one script call per lock in one pipeline and returns
// per lock 1 (yes), 0 (not ours) or -1 (error). go-redis's EVALSHA-to-EVAL
// fallback does not apply inside pipelines, so calls that failed with
// NOSCRIPT (after SCRIPT FLUSH, a restart, a failover) are sent again with
// EVAL: a missing script must never read as "not held".
func pipelineScript(ctx context.Context, cl Client, locks []*Lock, ttls []time.Duration) ([]int8, error) {
	renew := ttls != nil
	var replicas int
	var ackTimeout time.Duration
	if renew {
		if replicas, ackTimeout = batchAcks(locks); replicas > 0 && keyRouted(cl) {
			return renewAcked(ctx, cl, locks, ttls)
		}
	}
	call := func(i, p int) (*redis.Script, []string, []any) {
		if renew {
			return locks[i].extendCmd(p, ttls[i])
		}
		return locks[i].releaseCmd(p)
	}
	// One command per part of each lock (one, except for a multi-name lock
	// spread over shards).
	type sent struct {
		cmd     *redis.Cmd
		lock    int
		part    int
		retried bool // sent again with EVAL after NOSCRIPT
	}
	cmds := make([]sent, 0, len(locks))
	pipe := cl.Pipeline()
	for i, l := range locks {
		for p := range l.parts() {
			s, keys, args := call(i, p)
			cmds = append(cmds, sent{cmd: s.EvalSha(ctx, pipe, keys, args...), lock: i, part: p})
		}
	}
	// With replica acks, one WAIT ends each pipeline: it runs on the
	// pipeline's connection, after its scripts (see replicaacks.go).
	var wait, waitAgain *redis.Cmd
	if replicas > 0 {
		wait = waitCmd(ctx, pipe, replicas, ackTimeout)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	pipe = nil
	for j := range cmds {
		if !isNoScript(cmds[j].cmd.Err()) {
			continue
		}
		if pipe == nil {
			pipe = cl.Pipeline()
		}
		s, keys, args := call(cmds[j].lock, cmds[j].part)
		cmds[j].cmd, cmds[j].retried = s.Eval(ctx, pipe, keys, args...), true
	}
	if pipe != nil {
		if replicas > 0 {
			waitAgain = waitCmd(ctx, pipe, replicas, ackTimeout)
		}
		_, _ = pipe.Exec(ctx)
	}
	vals := make([]int64, len(locks))
	errs := make([]error, len(locks))
	retried := make([]bool, len(locks))
	for _, c := range cmds {
		i := c.lock
		if errs[i] != nil {
			continue
		}
		v, err := c.cmd.Int64()
		if err != nil {
			errs[i] = err
			continue
		}
		retried[i] = retried[i] || c.retried
		if renew {
			vals[i] = foldExtend(vals[i], v, c.part == 0)
		} else {
			vals[i] = foldRelease(vals[i], v, c.part == 0)
		}
	}
	codes := make([]int8, len(locks))
	var firstErr error
	for i, l := range locks {
		v, err := vals[i], errs[i]
		switch {
		case err != nil:
			codes[i] = -1
			if firstErr == nil {
				firstErr = err
			}
		case !renew:
			if r := releaseReply(l, v, nil); r.ok {
				codes[i] = 1
			}
		case v == 1 && l.replicas > 0:
			// Extended on the master; a vote only with the replicas' acks,
			// counted by the WAIT of the connection this script ran on.
			w := wait
			if retried[i] {
				w = waitAgain
			}
			if err := ackError(w, int(l.replicas), ackTimeout); err != nil {
				codes[i] = -1
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			codes[i] = 1
		case v == 1:
			codes[i] = 1
		case v == extTaken, v == extLate:
			codes[i] = int8(v)
		}
	}
	return codes, firstErr
}
