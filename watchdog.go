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
// applies the Redlock rule per lock: renewed iff a quorum extended and the
// new validity, measured from before the send, is still ahead. It returns as
// soon as every lock's outcome is settled, so a hung minority of nodes costs
// a Redlock nothing.
func (w *watchdog) renew(due []*Lock) {
	c := w.c
	defer func() {
		for _, l := range due {
			l.io.Unlock()
		}
	}()
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
	res := c.batch(w.ctx, due, ttls, deadline, w.quit)
	now := time.Now()
	for i, l := range due {
		r := res[i]
		until := validUntil(t1, ttls[i], l.driftFactor)
		switch {
		case r.ok >= c.quorum && now.Before(until):
			if l.renewed(ttls[i], until) {
				w.schedule(l, l.renewAt(t1))
			}
			if l.obs != nil {
				l.observeRenew(false, ttls[i], t1, l.Err(), r.err)
			}
		case c.impossible(r.no):
			if l.obs != nil {
				l.observeRenew(false, ttls[i], t1, refusalReason(r.no, r.taken), r.err)
			}
			l.lose(refusalReason(r.no, r.taken), r.err)
		default:
			if l.obs != nil {
				l.observeRenew(false, ttls[i], t1, r.err, r.err)
			}
			l.renewFailed(r.err, r.no > 0)
			if l.logger.Enabled(context.Background(), slog.LevelWarn) {
				l.logger.Warn("redlock: renewal failed, retrying", "name", l.name, "extended", r.ok, "nodes", len(c.nodes), "err", r.err)
			}
			// Retry soon; the loss clock fires at Until if this keeps failing.
			w.schedule(l, now.Add(max(l.renewEvery()/4, time.Millisecond)))
		}
	}
}

// batchResult is the outcome of one pipelined script for one lock over all
// nodes.
type batchResult struct {
	ok, no, failed int
	taken          int // of no: another owner's value, not a missing key
	err            error
}

// batch runs the extend script (ttls != nil) or the release script (ttls ==
// nil) for every lock on every node, one pipeline per node, and waits until
// every lock's outcome is settled by quorum, the deadline passes, or quit
// closes. A renewal skips a node whose previous renewal has not answered
// yet (counted as failed), so a hung node ties up one goroutine, not one per
// period.
func (c *core) batch(ctx context.Context, locks []*Lock, ttls []time.Duration, deadline time.Time, quit <-chan struct{}) []batchResult {
	out := make([]batchResult, len(locks))
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
	var rs []reply
	if len(nodes) > 0 {
		ch, err := c.fanOut(ctx, nodes, time.Until(deadline), time.Until(deadline), func(ctx context.Context, n *node) reply {
			if renew {
				defer n.renewing.Store(false)
			}
			codes, err := pipelineScript(ctx, n.client, locks, ttls)
			return reply{codes: codes, err: err}
		})
		if err != nil {
			for _, n := range nodes {
				if renew {
					n.renewing.Store(false)
				}
				rs = append(rs, reply{node: n.idx, err: err})
			}
		} else {
			rs, _ = gather(ch, nodes, deadline, quit, func(rs []reply) bool {
				return c.batchSettled(append(rs, skipped...), len(locks))
			})
		}
	}
	rs = append(rs, skipped...)
	for _, r := range rs {
		for i := range out {
			c.tallyBatch(&out[i], r, i, true)
		}
	}
	return out
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
		if r.codes[i] == extTaken {
			res.taken++
		}
	}
}

// batchSettled reports that every one of n locks has a quorum of yes, or can
// no longer get one, from the replies so far.
func (c *core) batchSettled(rs []reply, n int) bool {
	for i := range n {
		var res batchResult
		for _, r := range rs {
			c.tallyBatch(&res, r, i, false)
		}
		if res.ok < c.quorum && !c.impossible(res.no+res.failed) {
			return false
		}
	}
	return true
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
		case v == extTaken:
			codes[i] = extTaken
		}
	}
	return codes, firstErr
}
