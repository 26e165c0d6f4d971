package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/lifecycle"
	"github.com/redlockgo/redlock/internal/node"
)

// Pool is the nodes of a core and the one quorum round that every
// operation runs over them: send to every node (from the caller's goroutine
// when one node bounds the call itself, else one goroutine per node, a
// worker's: lifecycle.Go),
// gather the replies until the outcome is settled or the node timeout
// passes, tally them, and build the one error of a round that fell short.
// It knows nothing of held locks or waiters. The calls built on the round
// live with their concepts: internal/node (one node and its time bound),
// identity.go (which server is behind a node), release.go and lease.go.
type Pool struct {
	cleanup // its life: the goroutines of the core
	Nodes   []*node.Node
	Quorum  int
	Ids     idents
}

// spare reports whether a round can do without n's call when admit refuses
// it: the other nodes that answer make a quorum by themselves. When they do
// not, the round needs n's vote and waits for it anyway (up to the node
// timeout), so its call goes: it cannot pile up behind rounds that end
// without it.
func (p *Pool) spare(n *node.Node) bool {
	now := time.Now().UnixNano()
	others := 0
	for _, o := range p.Nodes {
		if o != n && !o.IsDup() && !o.Quiet(now) {
			others++
		}
	}
	return others >= p.Quorum
}

// send reports whether a round's call of an acquisition or release goes to
// n (admit), or is left out, the round doing without it (spare).
func (p *Pool) send(n *node.Node) bool { return n.Admit() || !p.spare(n) }

// Reply is one node's answer to one script call.
type Reply struct {
	Node int
	OK   bool  // the script said yes (granted, released, extended, raised)
	Code int64 // the script's status, by script
	val  int64 // token or PTTL, by script
	// holder is the value of the key when acquire.lua found another owner.
	holder string
	// codes holds per-lock results of a pipelined batch (see batch).
	codes []int8
	// Inspected is inspect.lua's answer (read by the root package's inspect.go).
	Inspected *NodeHolder
	Err       error
	// unsent: the call was not made (node.admit), err says the node is
	// silent.
	unsent bool
}

// inline reports whether a round calls nodes from the caller's goroutine,
// and whether with a ctx deadline (see callInline). Only when nothing can
// end the caller's wait: neither the ctx the call runs on nor done, the
// caller's own ctx that a detached call leaves behind. go-redis turns a ctx
// deadline into a socket deadline but does not interrupt a read on
// cancellation, so a cancellable caller needs the goroutine path for gather
// to stop waiting at once: a Lock whose ctx ends returns then, and the
// grant that arrives later is released by its own call (Lock.settle).
func inline(ctx context.Context, done <-chan struct{}, nodes []*node.Node, timeout time.Duration) (withDeadline, ok bool) {
	if len(nodes) != 1 || ctx.Done() != nil || done != nil {
		return false, false
	}
	return nodes[0].Bounded(timeout)
}

// fan is one round of fanOut's goroutines: one per node, all sharing ctx.
type fan struct {
	life    *lifecycle.Life
	ctx     context.Context
	cancel  context.CancelFunc
	nodes   []*node.Node
	call    func(context.Context, *node.Node, node.Client) Reply
	ch      chan Reply
	timeout time.Duration // the node timeout, when the calls are bounded by it (see node.CallClient); else 0
	next    atomic.Int32  // index in nodes of the next goroutine's node
	left    atomic.Int32  // calls not finished yet
}

func (f *fan) client(n *node.Node) node.Client { return node.CallClient(n, f.timeout) }

func (f *fan) run() {
	defer f.life.WG.Done()
	n := f.nodes[f.next.Add(1)-1]
	n.Begin()
	r := f.call(f.ctx, n, f.client(n))
	n.End(r.Err)
	r.Err = n.Outcome(r.Err)
	if f.left.Add(-1) == 0 {
		f.cancel()
	}
	r.Node = n.Idx
	f.ch <- r
}

// Detached is context.WithoutCancel(ctx), without its allocation when ctx
// can never be cancelled and has no deadline (context.Background, or a ctx
// already detached): there is nothing to detach from.
func Detached(ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); !ok && ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// gather reads replies from ch until stop says enough, every node answered,
// the deadline passed, or done closed. Nodes that did not answer get an
// node.ErrTimeout reply. It reports whether done ended the wait.
func gather(ch <-chan Reply, nodes []*node.Node, deadline time.Time, done <-chan struct{}, stop func([]Reply) bool) (got []Reply, interrupted bool) {
	got = make([]Reply, 0, len(nodes))
	// Replies already there (an inline call) need no timer.
	for len(got) < len(nodes) && len(ch) > 0 && !stop(got) {
		got = append(got, <-ch)
	}
	if len(got) == len(nodes) || stop(got) {
		return got, false
	}
	start := time.Now()
	t := node.GetTimer(time.Until(deadline))
	defer node.PutTimer(t)
	var grace <-chan time.Time // see silentGrace
	for len(got) < len(nodes) && !stop(got) {
		if grace == nil && len(got) > 0 && onlySilentLeft(got, nodes) {
			g := time.NewTimer(silentGrace(time.Since(start)))
			defer g.Stop()
			grace = g.C
		}
		select {
		case r := <-ch:
			got = append(got, r)
		case <-t.C:
			return timedOutRest(got, nodes, true), false
		case <-grace:
			return timedOutRest(got, nodes, false), false
		case <-done:
			return got, true
		}
	}
	return got, false
}

// timedOutRest adds to got a timed-out reply for every node it lacks,
// marking those nodes silent when silence is set.
func timedOutRest(got []Reply, nodes []*node.Node, silence bool) []Reply {
	for _, n := range nodes {
		if _, ok := replyOf(got, n.Idx); !ok {
			if silence {
				n.Silence()
			}
			got = append(got, Reply{Node: n.Idx, Err: n.TimedOut()})
		}
	}
	return got
}

// onlySilentLeft reports that every node without a reply in got did not
// answer its last call either (node.silent).
func onlySilentLeft(got []Reply, nodes []*node.Node) bool {
	for _, n := range nodes {
		if _, ok := replyOf(got, n.Idx); !ok && !n.Silent.Load() {
			return false
		}
	}
	return true
}

// silentGrace is how long a round whose other nodes have answered, after
// elapsed, still waits for nodes that did not answer their last call (a
// paused master, a silent link): not the whole node timeout, which stalled
// every round of a Redlock with one hung master of three; but enough for a
// node that came back to answer as fast as the others did (its answer
// clears the mark). A node cut off this way counts as timed out; its late
// answer is handled as any other (a late grant is released, Lock.settle).
func silentGrace(elapsed time.Duration) time.Duration {
	return max(5*time.Millisecond, 3*elapsed)
}

// Never is a gather stop function that waits for every node.
func Never([]Reply) bool { return false }

func replyOf(rs []Reply, idx int) (Reply, bool) {
	for _, r := range rs {
		if r.Node == idx {
			return r, true
		}
	}
	return Reply{}, false
}

// tally counts the replies of one round.
type tally struct {
	OK, No, Failed, permanent int
	Errs                      []error
}

// CtxErrIf is ctx.Err() when interrupted says the ctx ended a round's wait.
func CtxErrIf(ctx context.Context, interrupted bool) error {
	if interrupted {
		return ctx.Err()
	}
	return nil
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// fanOut calls every node in nodes concurrently. go-redis applies ctx
// deadlines to sockets only when the client enables it, so the bound is the
// caller's: it stops reading the channel at its deadline (gather). The
// channel is buffered to len(nodes), so calls that finish late (a paused
// server resumes) never block. Callers pass a ctx detached from their
// caller's cancellation (context.WithoutCancel) for writes: a write that is
// cut half-way has an unknown outcome, which is worse than one that
// completes and is then cleaned up; the watchdog passes one that Close
// cancels.
//
// callLimit bounds the call itself in the goroutine, when longer than timeout:
// a renewal pipeline may take until its locks' validity. Such a call runs on
// the client itself; a call bounded by timeout runs on the client's clone
// whose socket timeouts are timeout (node.CallClient): a release that a node did
// not answer in time is sent again by releaseNode rather than waited for,
// and the pool keeps its connections. A single node whose client bounds the call
// itself (see node.bounded) is called inline, when nothing can cancel ctx
// (a caller that gathers until its own ctx ends uses round): no goroutine,
// no timer.
func (p *Pool) fanOut(ctx context.Context, nodes []*node.Node, timeout, callLimit time.Duration, call func(context.Context, *node.Node, node.Client) Reply) (<-chan Reply, error) {
	if withDeadline, ok := inline(ctx, nil, nodes, timeout); ok {
		ch := make(chan Reply, 1)
		ch <- p.callInline(ctx, nodes[0], withDeadline, timeout, call)
		return ch, nil
	}
	return p.spawn(ctx, nodes, timeout, callLimit, call)
}

// spawn is fanOut's goroutine path: a goroutine per node, each an idle
// worker's when one waits (lifecycle.Go).
func (p *Pool) spawn(ctx context.Context, nodes []*node.Node, timeout, callLimit time.Duration, call func(context.Context, *node.Node, node.Client) Reply) (<-chan Reply, error) {
	ch := make(chan Reply, len(nodes))
	if !p.life.GoCount(len(nodes)) {
		return nil, Say.ErrClosed
	}
	limit := max(timeout, callLimit)
	var bound time.Duration // see node.CallClient
	if callLimit <= timeout {
		// A little past the round's deadline, so that its timer, not the
		// calls' own errors coming in one by one, says which nodes did not
		// answer in time (a round that stopped at the third of five would
		// name three).
		bound = timeout + timeout/4
		limit = bound
	}
	if len(nodes) == 1 {
		// Nothing to share: one closure, and no fan to allocate.
		n := nodes[0]
		p.life.Go(func() {
			defer p.life.WG.Done()
			cctx, cancel := context.WithTimeout(ctx, limit)
			n.Begin()
			r := call(cctx, n, node.CallClient(n, bound))
			n.End(r.Err)
			cancel()
			r.Err = n.Outcome(r.Err)
			r.Node = n.Idx
			ch <- r
		})
		return ch, nil
	}
	// One bound for the whole round rather than one per node: every call
	// gets the same deadline, and a Redlock of N masters pays for one context
	// and one timer instead of N. The last call to finish releases it.
	f := &fan{life: p.life, nodes: nodes, call: call, ch: ch, timeout: bound}
	f.ctx, f.cancel = context.WithTimeout(ctx, limit)
	f.left.Store(int32(len(nodes)))
	// One func value shared by the goroutines, each of which takes the next
	// node: a closure per goroutine would be one allocation per node.
	run := f.run
	for range nodes {
		p.life.Go(run)
	}
	return ch, nil
}

// Round is fanOut then gather, for the hot paths: a reply made inline goes
// straight into the result, with no channel to allocate for it.
func (p *Pool) Round(ctx context.Context, nodes []*node.Node, timeout, callLimit time.Duration, call func(context.Context, *node.Node, node.Client) Reply,
	deadline time.Time, done <-chan struct{}, stop func([]Reply) bool) (rs []Reply, interrupted bool, err error) {
	if withDeadline, ok := inline(ctx, done, nodes, timeout); ok {
		return []Reply{p.callInline(ctx, nodes[0], withDeadline, timeout, call)}, false, nil
	}
	ch, err := p.spawn(ctx, nodes, timeout, callLimit, call)
	if err != nil {
		return nil, false, err
	}
	rs, interrupted = gather(ch, nodes, deadline, done, stop)
	return rs, interrupted, nil
}

// callInline runs call on a node whose client bounds the call itself (by
// its socket timeouts, or by the ctx deadline set here when withDeadline).
func (p *Pool) callInline(ctx context.Context, n *node.Node, withDeadline bool, timeout time.Duration, call func(context.Context, *node.Node, node.Client) Reply) Reply {
	start := time.Now()
	if withDeadline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	r := call(ctx, n, n.ClientFor(timeout))
	r.Err = n.Outcome(r.Err)
	if r.Err != nil && time.Since(start) >= timeout && !node.IsServerError(r.Err) && !errors.Is(r.Err, node.ErrTimeout) {
		// The socket deadline fired: same error as the goroutine path.
		r.Err = fmt.Errorf("%w (%w)", node.ErrTimeout, r.Err)
	}
	r.Node = n.Idx
	return r
}

// Count tallies replies. A node found to be a second address of another
// node's server never counts as a yes: one server must not cast two votes.
func (p *Pool) Count(rs []Reply) tally {
	var t tally
	for _, r := range rs {
		err := r.Err
		if err == nil && p.Nodes[r.Node].IsDup() {
			err = node.ErrDuplicate
		}
		switch {
		case err != nil:
			t.Failed++
			if node.IsPermanent(err) || (p.Nodes[r.Node].Fixed && redis.IsReadOnlyError(err)) {
				t.permanent++
			}
			t.Errs = append(t.Errs, p.NodeErr(r.Node, err))
		case r.OK:
			t.OK++
		default:
			t.No++
		}
	}
	return t
}

// ShortOf is the one error of a round that reached too few nodes: what op
// reached, then, joined, every node's error and, when the caller's ctx
// ended the wait (ctxErr not nil), that. after is said behind the count
// ("; the lock frees itself when its lease ends").
func (p *Pool) ShortOf(op, name string, t tally, after string, ctxErr error) error {
	errs := make([]error, 0, len(t.Errs)+2)
	errs = append(errs, fmt.Errorf("redlock: %s %q reached %d of %d nodes, need %d%s", op, name, t.OK, len(p.Nodes), p.Quorum, after))
	errs = append(errs, t.Errs...)
	if ctxErr != nil {
		errs = append(errs, ctxErr)
	}
	return Say.Join(errs...)
}

// NotOurs says on how many nodes a round found the key gone or another
// owner's.
func (p *Pool) NotOurs(t tally) error {
	if len(p.Nodes) == 1 {
		return errors.New("the key is gone or another owner's")
	}
	return fmt.Errorf("the key is gone or another owner's on %d of %d nodes", t.No, len(p.Nodes))
}

// Settled reports that the outcome of a round is decided: a quorum said yes,
// or so many said no or failed that a quorum of yes is out of reach.
//
// A call not sent to a silent node (its reply is there at once) does not
// settle a round before the nodes that were sent one have answered: an
// attempt that fails withdraws its grants before it returns, and it has to
// know them first.
func (p *Pool) Settled(rs []Reply) bool {
	t := p.Count(rs)
	if t.OK >= p.Quorum {
		return true
	}
	failed := t.Failed
	if len(rs) < len(p.Nodes) {
		for _, r := range rs {
			if r.unsent {
				failed--
			}
		}
	}
	return p.Impossible(t.No + failed)
}

// Impossible reports that a quorum of yes can no longer be reached from the
// nodes that said no (or failed) in this round.
func (p *Pool) Impossible(no int) bool { return no > len(p.Nodes)-p.Quorum }

func (p *Pool) NodeErr(i int, err error) error {
	return Say.NodeError(i, p.Nodes[i].Addr, err)
}

// NodeHolder is inspect.lua's answer from one node.
type NodeHolder struct {
	Owner    string // "" when the name is free on the node
	PTTL     int64  // ms; -1: no expiry; -2: no key
	Token    int64
	Metadata string
	Readers  int   // live read holds
	RPTTL    int64 // ms until the last of them ends
}
