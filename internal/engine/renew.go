package engine

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/scripts"
)

// One round of renewals (or of releases, for Close) for many locks at once:
// one pipeline per node, each lock settled by its own quorum as soon as the
// replies decide it.

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
// gone, when not nil, is told from the node's call of every lock whose
// renewal found its key gone on that node, whenever that reply comes,
// before or after the lock is settled (lease repair, repair.go). via, when
// not nil, names per node a client to renew on instead of the node's (a
// tracking data connection, track.go): its renewals read their keys again
// after moving them, so that they stay tracked.
func (p *Pool) batch(ctx context.Context, locks []*Hold, ttls []time.Duration, deadline time.Time, quit <-chan struct{}, settle func(int, batchResult), moveOn chan struct{}, gone func(int, *node.Node), via *dataRoutes) []batchResult {
	b := &batchRound{p: p, out: make([]batchResult, len(locks)), done: make([]bool, len(locks)), left: len(locks), settle: settle, moveOn: moveOn}
	return b.run(ctx, locks, ttls, deadline, quit, gone, via)
}

// run is batch's round.
func (b *batchRound) run(ctx context.Context, locks []*Hold, ttls []time.Duration, deadline time.Time, quit <-chan struct{}, gone func(int, *node.Node), via *dataRoutes) []batchResult {
	p := b.p
	defer b.letGo()
	if len(locks) == 0 {
		return b.out
	}
	renew := ttls != nil
	nodes := make([]*node.Node, 0, len(p.Nodes))
	for _, n := range p.Nodes {
		if renew && !n.Renewing.CompareAndSwap(false, true) {
			b.rs = append(b.rs, Reply{Node: n.Idx, Err: node.ErrBusy})
			continue
		}
		nodes = append(nodes, n)
	}
	b.skipped, b.timeout = len(b.rs), locks[0].timeout
	if len(nodes) == 0 {
		b.decide(true, false)
		return b.out
	}
	ch, err := p.fanOut(ctx, nodes, b.timeout, time.Until(deadline), func(ctx context.Context, n *node.Node, cl node.Client) Reply {
		if renew {
			defer n.Renewing.Store(false)
		} else { // Close's release: see releasesSent
			releasesSent(locks, n.Idx)
		}
		rearm := renew && via.on(n.Idx)
		if rearm {
			cl = via.clients[n.Idx]
		}
		codes, err := pipelineScript(ctx, cl, locks, ttls, rearm)
		if rearm {
			via.t.dataDone(cl, err)
		}
		if renew {
			releaseLate(ctx, n, locks, codes)
			if gone != nil {
				for i, code := range codes {
					if code == scripts.ReplyGone {
						gone(i, n)
					}
				}
			}
		}
		return Reply{codes: codes, Err: err}
	})
	if err != nil {
		for _, n := range nodes {
			if renew {
				n.Renewing.Store(false)
			}
			b.rs = append(b.rs, Reply{Node: n.Idx, Err: err})
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
	p       *Pool
	rs      []Reply // replies so far; the first skipped are nodes left out
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
func (b *batchRound) gather(ch <-chan Reply, nodes []*node.Node, deadline time.Time, quit <-chan struct{}) {
	t := node.GetTimer(time.Until(deadline))
	defer node.PutTimer(t)
	var soft <-chan time.Time
	if b.settle != nil && time.Until(deadline) > b.timeout {
		st := node.GetTimer(b.timeout)
		defer node.PutTimer(st)
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
				if _, ok := replyOf(b.rs, n.Idx); !ok {
					n.Silence()
					b.rs = append(b.rs, Reply{Node: n.Idx, Err: n.TimedOut()})
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
		b.tallyBatch(&res, r, i, withErr)
	}
	return res
}

// decide settles every lock that the replies so far decide (all of them
// when final), and lets the scheduler go once nothing is left to wait for
// but a minority.
func (b *batchRound) decide(final, interrupted bool) {
	p := b.p
	for i := range b.out {
		if b.done[i] {
			continue
		}
		if res := b.tally(i, false); !final && res.ok < p.Quorum && !p.Impossible(res.no+res.failed) {
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
	if answered := len(b.rs) - b.skipped; b.left == 0 || answered >= p.Quorum || final {
		b.letGo()
	}
}

// partial gives every lock still open what one node timeout brought, the
// nodes that have not answered named in its error.
func (b *batchRound) partial(nodes []*node.Node) {
	for i := range b.out {
		if b.done[i] {
			continue
		}
		res := b.tally(i, true)
		res.partial = true
		for _, n := range nodes {
			if _, ok := replyOf(b.rs, n.Idx); !ok {
				res.err = Say.Join(res.err, b.p.NodeErr(n.Idx, node.ErrTimeout))
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
func releaseLate(ctx context.Context, n *node.Node, locks []*Hold, codes []int8) {
	var late []*Hold
	for i, l := range locks {
		if i < len(codes) && codes[i] == 1 && l.is(stateLost) {
			late = append(late, l)
		}
	}
	if len(late) > 0 {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), late[0].timeout)
		defer cancel()
		_, _ = pipelineScript(ctx, n.Client, late, nil, false)
	}
}

// tallyBatch adds node reply r's answer for lock i to res, and, when
// withErr, that node's error or refusal.
func (b *batchRound) tallyBatch(res *batchResult, r Reply, i int, withErr bool) {
	switch {
	case r.codes == nil || r.codes[i] < 0 || b.p.Nodes[r.Node].IsDup():
		res.failed++
		if !withErr {
			return
		}
		err := r.Err
		if err == nil {
			err = node.ErrDuplicate
		}
		res.err = Say.Join(res.err, b.p.NodeErr(r.Node, err))
	case r.codes[i] == 1:
		res.ok++
	default:
		res.no++
		switch r.codes[i] {
		case scripts.ReplyTaken:
			res.taken++
		case scripts.ReplyLate:
			res.late++
		}
		if withErr {
			res.err = Say.Join(res.err, b.p.NodeErr(r.Node, refusalOf(int64(r.codes[i]))))
		}
	}
}

// pipelineScript sends one script call per lock in one pipeline and returns
// per lock 1 (yes), 0 (not ours), scripts.ReplyTaken, scripts.ReplyLate or -1 (error).
// go-redis's EVALSHA-to-EVAL fallback does not apply inside pipelines, so
// calls that failed with NOSCRIPT (after SCRIPT FLUSH, a restart, a
// failover) are sent again with EVAL: a missing script must never read as
// "not held". rearm: the renewals read their keys again after moving them
// (on a tracking data connection, where the move untracked them).
func pipelineScript(ctx context.Context, cl node.Client, locks []*Hold, ttls []time.Duration, rearm bool) ([]int8, error) {
	p := pipelined{locks: locks, ttls: ttls, rearm: rearm}
	if p.renew() {
		if p.replicas, p.ackTimeout = batchAcks(locks); p.replicas > 0 && KeyRouted(cl) {
			return renewAcked(ctx, cl, locks, ttls)
		}
	}
	p.send(ctx, cl)
	return p.codes()
}

// pipelined is one node's pipeline of a batch: one command per part of
// each lock (one, except for a multi-name lock spread over shards).
type pipelined struct {
	locks      []*Hold
	ttls       []time.Duration // nil: release
	replicas   int             // WithReplicaAcks of the renewals, 0 without
	ackTimeout time.Duration
	rearm      bool // see pipelineScript
	read       bool // the pttl scripts instead (readLeases), with ttls nil
	cmds       []sentScript
	// With replica acks, one WAIT ends each pipeline: it runs on the
	// pipeline's connection, after its scripts (see scriptAcked); wait
	// for the first, waitAgain for the EVAL retries.
	wait, waitAgain *redis.Cmd
}

type sentScript struct {
	cmd     *redis.Cmd
	lock    int
	part    int
	retried bool      // sent again with EVAL after NOSCRIPT
	keep    *keepCall // a companion of the renewal (keep.lua), whose reply counts for nothing
}

func (p *pipelined) renew() bool { return p.ttls != nil }

func (p *pipelined) call(i, part int) (*redis.Script, []string, []any) {
	if p.read {
		return kinds[p.locks[i].Kind].pttl(p.locks[i], part, 0)
	}
	if p.renew() {
		k := &kinds[p.locks[i].Kind]
		s, keys, args := k.extend(p.locks[i], part, p.ttls[i])
		if p.rearm && k.rearmArg {
			args = append(args, 1) // ARGV[4]: read the key again
		}
		return s, keys, args
	}
	return kinds[p.locks[i].Kind].release(p.locks[i], part, 0)
}

// send runs the pipeline, then again with EVAL the calls that found no
// script; errors are read per command by codes.
func (p *pipelined) send(ctx context.Context, cl node.Client) {
	p.cmds = make([]sentScript, 0, len(p.locks))
	pipe := cl.Pipeline()
	for i, l := range p.locks {
		for part := range parts(l) {
			s, keys, args := p.call(i, part)
			p.cmds = append(p.cmds, sentScript{cmd: s.EvalSha(ctx, pipe, keys, args...), lock: i, part: part})
		}
		if p.renew() {
			for _, k := range companions(l, p.ttls[i], nil) {
				p.cmds = append(p.cmds, sentScript{cmd: scripts.Keep.EvalSha(ctx, pipe, []string{k.key}, k.args...), lock: i, keep: &k})
			}
		}
	}
	if p.replicas > 0 {
		p.wait = waitCmd(ctx, pipe, p.replicas, p.ackTimeout)
	}
	_, _ = pipe.Exec(ctx)
	pipe = nil
	for j := range p.cmds {
		if !node.IsNoScript(p.cmds[j].cmd.Err()) {
			continue
		}
		if pipe == nil {
			pipe = cl.Pipeline()
		}
		if k := p.cmds[j].keep; k != nil {
			p.cmds[j].cmd = scripts.Keep.Eval(ctx, pipe, []string{k.key}, k.args...)
			continue
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
		if errs[i] != nil || c.keep != nil {
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
func (p *pipelined) code(l *Hold, v int64, retried bool) (int8, error) {
	switch {
	case !p.renew():
		if r := releaseReply(l, v, nil); r.OK {
			return 1, nil
		}
	case v == scripts.ReplyOK && l.replicas > 0:
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
	case v == scripts.ReplyOK, v == scripts.ReplyTaken, v == scripts.ReplyLate:
		return int8(v), nil
	}
	return 0, nil
}

// batchAcks returns the replicas and timeout of the one WAIT a renewal batch
// sends per node: the largest asked for by any of its locks, so that the
// count answers every lock (each compares it with its own replicas).
func batchAcks(locks []*Hold) (int, time.Duration) {
	var replicas int
	var timeout time.Duration
	for _, l := range locks {
		if l.replicas > 0 {
			replicas = max(replicas, int(l.replicas))
			timeout = max(timeout, ackTimeout(l))
		}
	}
	return replicas, timeout
}

// renewAcked renews each lock on its own connection with its own WAIT: the
// path of a Cluster or Ring client, whose pipelines span shards. Slower than
// one pipeline, but only locks that asked for acks pay for it.
func renewAcked(ctx context.Context, cl node.Client, locks []*Hold, ttls []time.Duration) ([]int8, error) {
	codes := make([]int8, len(locks))
	var firstErr error
	for i, l := range locks {
		var v int64
		var err error
		if l.replicas > 0 {
			var cmd *redis.Cmd
			var ackErr error
			s, keys, args := kinds[l.Kind].extend(l, 0, ttls[i])
			cmd, ackErr = scriptAcked(ctx, cl, s, keys, int(l.replicas), ackTimeout(l), args...)
			v, err = cmd.Int64()
			if err == nil && v == scripts.ReplyOK && ackErr != nil {
				err = ackErr
			}
		} else {
			v, err = runParts(ctx, cl, l, kinds[l.Kind].extend, ttls[i], foldExtend)
		}
		keepCompanions(ctx, cl, l, ttls[i])
		codes[i] = extendCode(v, err)
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return codes, firstErr
}

// extendCode is a renewal's per-lock code in a batch: 1 extended, scripts.ReplyTaken
// another owner's, scripts.ReplyLate too near its end, 0 missing, -1 error.
func extendCode(v int64, err error) int8 {
	switch {
	case err != nil:
		return -1
	case v == scripts.ReplyOK:
		return 1
	case v == scripts.ReplyTaken, v == scripts.ReplyLate:
		return int8(v)
	}
	return 0
}
