package redlock

import (
	"container/heap"
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
	if !c.life.goCount(1) {
		for _, l := range due {
			l.io.Unlock()
		}
		return
	}
	moveOn := make(chan struct{})
	go func() {
		defer c.life.wg.Done()
		c.batch(w.ctx, due, ttls, deadline, w.quit, settle, moveOn)
	}()
	select {
	case <-moveOn:
	case <-w.quit:
	}
}

// apply records one lock's renewal outcome r, for a lease of ttl sent at t1.
// A lock that ends up lost although some nodes moved its lease (lost while
// the renewal was on the wire, or refused by too many others) is released
// there: the moved leases must not keep the name.
func (w *watchdog) apply(l *Lock, ttl time.Duration, t1 time.Time, r batchResult) {
	c := w.c
	if r.ok > 0 {
		defer func() {
			if l.isLost() {
				c.abandon(l)
			}
		}()
	}
	now := time.Now()
	until := validUntil(t1, ttl, l.driftFactor)
	switch {
	case r.ok >= c.pool.quorum && now.Before(until):
		if c.renewed(l, ttl, until) {
			w.schedule(l, l.renewAt(t1))
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
		if !l.held() {
			return
		}
		l.renewFailed(r.err, r.no > 0)
		if r.interrupted {
			return // Close: the lock is being released
		}
		if l.logger.Enabled(context.Background(), slog.LevelWarn) {
			l.logger.Warn("redlock: renewal failed, retrying", "name", l.name, "extended", r.ok, "nodes", len(c.pool.nodes), "err", r.err)
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
	b := &batchRound{c: c, out: make([]batchResult, len(locks)), done: make([]bool, len(locks)), left: len(locks), settle: settle, moveOn: moveOn}
	defer b.letGo()
	if len(locks) == 0 {
		return b.out
	}
	renew := ttls != nil
	nodes := make([]*node, 0, len(c.pool.nodes))
	for _, n := range c.pool.nodes {
		if renew && !n.renewing.CompareAndSwap(false, true) {
			b.rs = append(b.rs, reply{node: n.idx, err: errNodeBusy})
			continue
		}
		nodes = append(nodes, n)
	}
	b.skipped, b.timeout = len(b.rs), locks[0].timeout
	if len(nodes) == 0 {
		b.decide(true, false)
		return b.out
	}
	ch, err := c.pool.fanOut(ctx, nodes, time.Until(deadline), time.Until(deadline), func(ctx context.Context, n *node) reply {
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
			b.rs = append(b.rs, reply{node: n.idx, err: err})
		}
		b.decide(true, false)
		return b.out
	}
	b.gather(ch, nodes, deadline, quit)
	return b.out
}

// batchRound is one batch's tally: the replies so far and which locks are
// settled.
type batchRound struct {
	c       *core
	rs      []reply // replies so far; the first skipped are nodes left out
	skipped int
	out     []batchResult
	done    []bool
	left    int           // locks not settled yet
	timeout time.Duration // the locks' node timeout: when partial outcomes are due
	settle  func(int, batchResult)
	moveOn  chan struct{}
	moved   bool
}

// gather reads the nodes' replies, settling locks as they are decided,
// until every lock is, the deadline passes or quit closes; one node timeout
// in, locks still open get a partial outcome.
func (b *batchRound) gather(ch <-chan reply, nodes []*node, deadline time.Time, quit <-chan struct{}) {
	t := getTimer(time.Until(deadline))
	defer putTimer(t)
	var soft <-chan time.Time
	if b.settle != nil && time.Until(deadline) > b.timeout {
		st := getTimer(b.timeout)
		defer putTimer(st)
		soft = st.C
	}
	for got := 0; got < len(nodes) && b.left > 0; {
		select {
		case r := <-ch:
			b.rs = append(b.rs, r)
			got++
			b.decide(false, false)
			continue
		case <-soft:
			soft = nil
			b.partial(nodes)
			continue
		case <-t.C:
			for _, n := range nodes {
				if _, ok := replyOf(b.rs, n.idx); !ok {
					b.rs = append(b.rs, reply{node: n.idx, err: errNodeTimeout})
				}
			}
		case <-quit:
			b.decide(true, true)
		}
		break
	}
	b.decide(true, false)
}

// tally is lock i's outcome from the replies so far, with the nodes'
// errors joined in when withErr (only for an outcome that is handed on: a
// batch of thousands of locks is tallied at every reply).
func (b *batchRound) tally(i int, withErr bool) batchResult {
	var res batchResult
	for _, r := range b.rs {
		b.c.tallyBatch(&res, r, i, withErr)
	}
	return res
}

// decide settles every lock that the replies so far decide (all of them
// when final), and lets the scheduler go once nothing is left to wait for
// but a minority.
func (b *batchRound) decide(final, interrupted bool) {
	c := b.c
	for i := range b.out {
		if b.done[i] {
			continue
		}
		if res := b.tally(i, false); !final && res.ok < c.pool.quorum && !c.pool.impossible(res.no+res.failed) {
			continue
		}
		res := b.tally(i, true)
		res.interrupted = interrupted
		b.out[i], b.done[i] = res, true
		b.left--
		if b.settle != nil {
			b.settle(i, res)
		}
	}
	if answered := len(b.rs) - b.skipped; b.left == 0 || answered >= c.pool.quorum || final {
		b.letGo()
	}
}

// partial gives every lock still open what one node timeout brought, the
// nodes that have not answered named in its error.
func (b *batchRound) partial(nodes []*node) {
	for i := range b.out {
		if b.done[i] {
			continue
		}
		res := b.tally(i, true)
		res.partial = true
		for _, n := range nodes {
			if _, ok := replyOf(b.rs, n.idx); !ok {
				res.err = errors.Join(res.err, b.c.pool.nodeErr(n.idx, errNodeTimeout))
			}
		}
		b.settle(i, res)
	}
}

func (b *batchRound) letGo() {
	if !b.moved && b.moveOn != nil {
		b.moved = true
		close(b.moveOn)
	}
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

// tallyBatch adds node reply r's answer for lock i to res, and, when
// withErr, that node's error or refusal.
func (c *core) tallyBatch(res *batchResult, r reply, i int, withErr bool) {
	switch {
	case r.codes == nil || r.codes[i] < 0 || c.pool.nodes[r.node].isDup():
		res.failed++
		if !withErr {
			return
		}
		err := r.err
		if err == nil {
			err = errDuplicate
		}
		res.err = errors.Join(res.err, c.pool.nodeErr(r.node, err))
	case r.codes[i] == 1:
		res.ok++
	default:
		res.no++
		switch r.codes[i] {
		case replyTaken:
			res.taken++
		case replyLate:
			res.late++
		}
		if withErr {
			res.err = errors.Join(res.err, c.pool.nodeErr(r.node, refusalOf(int64(r.codes[i]))))
		}
	}
}

// pipelineScript sends one script call per lock in one pipeline and returns
// per lock 1 (yes), 0 (not ours), replyTaken, replyLate or -1 (error).
// go-redis's EVALSHA-to-EVAL fallback does not apply inside pipelines, so
// calls that failed with NOSCRIPT (after SCRIPT FLUSH, a restart, a
// failover) are sent again with EVAL: a missing script must never read as
// "not held".
func pipelineScript(ctx context.Context, cl Client, locks []*Lock, ttls []time.Duration) ([]int8, error) {
	p := pipelined{locks: locks, ttls: ttls}
	if p.renew() {
		if p.replicas, p.ackTimeout = batchAcks(locks); p.replicas > 0 && keyRouted(cl) {
			return renewAcked(ctx, cl, locks, ttls)
		}
	}
	p.send(ctx, cl)
	return p.codes()
}

// pipelined is one node's pipeline of a batch: one command per part of
// each lock (one, except for a multi-name lock spread over shards).
type pipelined struct {
	locks      []*Lock
	ttls       []time.Duration // nil: release
	replicas   int             // WithReplicaAcks of the renewals, 0 without
	ackTimeout time.Duration
	cmds       []sentScript
	// With replica acks, one WAIT ends each pipeline: it runs on the
	// pipeline's connection, after its scripts (see replicaacks.go); wait
	// for the first, waitAgain for the EVAL retries.
	wait, waitAgain *redis.Cmd
}

type sentScript struct {
	cmd     *redis.Cmd
	lock    int
	part    int
	retried bool // sent again with EVAL after NOSCRIPT
}

func (p *pipelined) renew() bool { return p.ttls != nil }

func (p *pipelined) call(i, part int) (*redis.Script, []string, []any) {
	if p.renew() {
		return kinds[p.locks[i].kind].extend(p.locks[i], part, p.ttls[i])
	}
	return kinds[p.locks[i].kind].release(p.locks[i], part, 0)
}

// send runs the pipeline, then again with EVAL the calls that found no
// script; errors are read per command by codes.
func (p *pipelined) send(ctx context.Context, cl Client) {
	p.cmds = make([]sentScript, 0, len(p.locks))
	pipe := cl.Pipeline()
	for i, l := range p.locks {
		for part := range parts(l) {
			s, keys, args := p.call(i, part)
			p.cmds = append(p.cmds, sentScript{cmd: s.EvalSha(ctx, pipe, keys, args...), lock: i, part: part})
		}
	}
	if p.replicas > 0 {
		p.wait = waitCmd(ctx, pipe, p.replicas, p.ackTimeout)
	}
	_, _ = pipe.Exec(ctx)
	pipe = nil
	for j := range p.cmds {
		if !isNoScript(p.cmds[j].cmd.Err()) {
			continue
		}
		if pipe == nil {
			pipe = cl.Pipeline()
		}
		s, keys, args := p.call(p.cmds[j].lock, p.cmds[j].part)
		p.cmds[j].cmd, p.cmds[j].retried = s.Eval(ctx, pipe, keys, args...), true
	}
	if pipe != nil {
		if p.replicas > 0 {
			p.waitAgain = waitCmd(ctx, pipe, p.replicas, p.ackTimeout)
		}
		_, _ = pipe.Exec(ctx)
	}
}

// codes folds the replies of each lock's parts into its code, and returns
// the first error.
func (p *pipelined) codes() ([]int8, error) {
	vals := make([]int64, len(p.locks))
	errs := make([]error, len(p.locks))
	retried := make([]bool, len(p.locks))
	for _, c := range p.cmds {
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
		if p.renew() {
			vals[i] = foldExtend(vals[i], v, c.part == 0)
		} else {
			vals[i] = foldRelease(vals[i], v, c.part == 0)
		}
	}
	codes := make([]int8, len(p.locks))
	var firstErr error
	for i, l := range p.locks {
		err := errs[i]
		if err == nil {
			codes[i], err = p.code(l, vals[i], retried[i])
		} else {
			codes[i] = -1
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return codes, firstErr
}

// code is one lock's code from its folded reply v.
func (p *pipelined) code(l *Lock, v int64, retried bool) (int8, error) {
	switch {
	case !p.renew():
		if r := releaseReply(l, v, nil); r.ok {
			return 1, nil
		}
	case v == replyOK && l.replicas > 0:
		// Extended on the master; a vote only with the replicas' acks,
		// counted by the WAIT of the connection this script ran on.
		w := p.wait
		if retried {
			w = p.waitAgain
		}
		if err := ackError(w, int(l.replicas), p.ackTimeout); err != nil {
			return -1, err
		}
		return 1, nil
	case v == replyOK, v == replyTaken, v == replyLate:
		return int8(v), nil
	}
	return 0, nil
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
