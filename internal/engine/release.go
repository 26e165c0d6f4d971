package engine

import (
	"context"
	"errors"
	"time"

	"github.com/redlockgo/redlock/internal/lifecycle"
	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/scripts"
)

// released is the verdict of an Unlock's release round: nil once a quorum
// released, ErrNotHeld when too many nodes no longer had our key.
func (p *Pool) released(l *Hold, rs []Reply) error {
	t := p.Count(rs)
	switch {
	case t.OK >= p.Quorum:
		return nil
	case p.Impossible(t.No):
		return Say.NotHeld("unlock", l.Name, p.NotOurs(t))
	}
	return p.ShortOf("unlock", l.Name, t, "; the lock frees itself when its lease ends", nil)
}

// releaseOn sends the release script for l to nodes and waits for their
// replies up to timeout, or until stop says enough. Callers use it for
// cleanup, so it runs detached from the caller's cancellation: a cancelled
// caller still releases. A node that did not answer by then (a paused
// server, a silent link: a call bounded by the node timeout drops its
// connection, and the command waiting in it with it) is released again in
// the background until it answers (releaseNode). After Close, when the core
// may start no goroutine, it releases node by node from the caller's
// goroutine: a grant that nobody will own must not hold the name for a
// whole lease.
func (p *Pool) releaseOn(ctx context.Context, l *Hold, nodes []*node.Node, timeout time.Duration, stop func([]Reply) bool) []Reply {
	if len(nodes) == 0 {
		return nil
	}
	argv := releaseArgv(l) // one command for every node: go-redis only reads it
	call := func(ctx context.Context, n *node.Node, cl node.Client) Reply {
		if ch := l.rel.await(n.Idx); ch != nil {
			return awaitRelease(ctx, n, ch)
		}
		if !p.send(n) {
			return Reply{Err: n.TimedOut(), unsent: true} // released in the background (releaseNode)
		}
		l.rel.sent(n.Idx)
		return releaseCall(ctx, cl, l, argv)
	}
	rs, _, err := p.Round(Detached(ctx), nodes, timeout, timeout, call, time.Now().Add(timeout), nil, stop)
	if err == nil {
		if silent := p.unanswered(rs); len(silent) > 0 {
			p.releaseInBackground(ctx, silent, l) // (locks... escapes: not on the common path)
		}
		return rs
	}
	rs = make([]Reply, 0, len(nodes))
	for _, n := range nodes {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		r := call(cctx, n, n.ClientFor(timeout))
		cancel()
		r.Node = n.Idx
		rs = append(rs, r)
	}
	return rs
}

// awaitRelease waits for the release of a node deferred to its acquire
// call (Lock.releaseTo) and returns its answer, as if releaseOn had sent it.
func awaitRelease(ctx context.Context, n *node.Node, ch <-chan Reply) Reply {
	select {
	case r := <-ch:
		if r.unsent {
			r.Err = n.TimedOut()
		}
		return r
	case <-ctx.Done():
		return Reply{Err: ctx.Err()}
	}
}

// unanswered returns the nodes whose reply in rs is an error that is not
// the server's: the call may or may not have run (the round's deadline
// gives every silent node such a reply). A node with no reply at all is
// one the round stopped waiting for once a quorum had decided: its call
// goes on, bounded by the lease, and a healthy Redlock's slowest master is
// not released twice.
func (p *Pool) unanswered(rs []Reply) []*node.Node {
	var out []*node.Node
	for _, r := range rs {
		if r.Err != nil && !node.IsServerError(r.Err) {
			out = append(out, p.Nodes[r.Node])
		}
	}
	return out
}

// cleanup is the releases that must reach a node whatever became of the
// call that needed them (a failed attempt, a late grant, a lost lock): each
// from a goroutine the core owns, so that Close waits for it, and retried
// until the node answers (releaseNode). The pool embeds it.
type cleanup struct{ life *lifecycle.Life }

// releaseInBackground releases locks, in order, on each of nodes from a
// goroutine of the core per node, waiting for none: their outcome is
// unknown (the nodes failed or did not answer), and they will not answer
// the release any sooner. A goroutine per node, so that a hung node does not
// keep the others' keys.
func (p *cleanup) releaseInBackground(ctx context.Context, nodes []*node.Node, locks ...*Hold) {
	if len(nodes) == 0 || len(locks) == 0 || !p.life.GoCount(len(nodes)) {
		return
	}
	for _, n := range nodes {
		p.life.Go(func() {
			defer p.life.WG.Done()
			for _, l := range locks {
				p.releaseNode(ctx, n, l, false)
			}
		})
	}
}

// releaseLater is releaseNode from a goroutine of its own (a worker's, see
// lifecycle.Go), for a call that found it has something to release: the
// call ends now, so that it is not counted on the wire (node.begin) while
// the release waits for the node.
func (p *cleanup) releaseLater(ctx context.Context, n *node.Node, l *Hold, ran bool) {
	if !p.life.GoCount(1) {
		// Close has ended its I/O: this goroutine, which Close waits for,
		// releases it itself, out of the bracket of the call it runs in
		// (node.Begin; releaseNode brackets its own sends). A release that
		// waits to be admitted must not count as a call on the wire: four
		// such on one node made it look stalled to each of them for good
		// (node.Admit), and none was sent before its lease ended.
		n.End(errAside)
		p.releaseNode(ctx, n, l, ran)
		n.Begin()
		return
	}
	p.life.Go(func() {
		defer p.life.WG.Done()
		p.releaseNode(ctx, n, l, ran)
	})
}

// errAside ends a call's bracket (node.End) for the time its goroutine
// waits on something other than the node: not an answer of the node.
var errAside = errors.New("redlock: call set aside")

// releaseNode releases l on node n from a goroutine the core already owns,
// until the node answers. ran says a call of l's is known to have run there
// (a grant whose reply came late): the first answer settles it. Otherwise
// its outcome is unknown: a paused server, or one behind a stalled link,
// runs the commands waiting in its sockets when it resumes, in no set order
// across connections, so a release sent meanwhile may run before the grant
// or renewal it is meant to undo; an answer "not ours" is then followed by
// one more release: by then the server has run every command that was
// waiting when it answered, and a grant among them is ours to delete. Each
// call is bounded by the node timeout, so a link that heals is used within
// that much (see ClientFor). It gives up after releaseRetryFor (three
// leases, if longer); once Close has begun, when the lease it releases
// would have ended (it outlives Close by that much at most), or at once on
// a node that refuses connections (a server that is not running holds no
// command of ours in a socket), or when the client is closed.
func (p *cleanup) releaseNode(ctx context.Context, n *node.Node, l *Hold, ran bool) {
	ctx = context.WithoutCancel(ctx)
	begun := time.Now()
	end := begun.Add(max(3*l.leaseTTL(), releaseRetryFor))
	leaseEnd := begun.Add(l.leaseTTL())
	cl := n.ClientFor(l.timeout)
	answered := ran
	for time.Now().Before(end) {
		start := time.Now()
		if !n.Admit() {
			// Other calls probe the node: ask again shortly, sending
			// nothing that would hold a connection in the meantime.
			if p.life.IsClosing() {
				end = earliest(end, leaseEnd)
			}
			t := node.GetTimer(node.ProbeEvery)
			<-t.C
			node.PutTimer(t)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, l.timeout)
		n.Begin()
		l.rel.sent(n.Idx)
		r := releaseCall(cctx, cl, l, releaseArgv(l))
		l.rel.done(n.Idx, r)
		n.End(r.Err)
		n.Note(r.Err)
		cancel()
		switch {
		case r.Err == nil && (r.OK || answered):
			return
		case r.Err == nil:
			answered = true
			continue
		case node.IsPermanent(r.Err):
			return
		}
		closing := p.life.Closing // the wait ends there, to take up the bound below
		if p.life.IsClosing() {
			if node.IsDialError(r.Err) {
				return
			}
			end, closing = earliest(end, leaseEnd), nil
		}
		t := node.GetTimer(l.timeout - time.Since(start))
		select {
		case <-t.C:
		case <-closing:
		}
		node.PutTimer(t)
	}
}

// releaseCall runs the release script of l: release.lua by argv (from
// releaseArgv), or, for the kinds with no argv, their own script.
func releaseCall(ctx context.Context, cl node.Client, l *Hold, argv []any) Reply {
	if retracts(l) {
		v, err := scripts.Sharded(scripts.Retract, l.sharded).Run(ctx, cl, l.Keys[:1], l.Owner).Int64()
		return releaseReply(l, v, err)
	}
	if argv == nil {
		v, err := runParts(ctx, cl, l, kinds[l.Kind].release, 0, foldRelease)
		return releaseReply(l, v, err)
	}
	v, err := node.RunEval(ctx, cl, scripts.Sharded(scripts.Release, l.sharded), argv).Int64()
	return releaseReply(l, v, err)
}

// retracts reports that a release of l withdraws the grants of a failed
// attempt (retract.lua) rather than giving up a held lock: an exclusive
// lock on one name that was never held.
func retracts(l *Hold) bool {
	return l.Kind == KindExclusive && parts(l) == 1 && l.is(stateFailed)
}

// releaseReply turns release.lua's reply into a node reply, logging a
// release whose wake-up message the server refused to publish: the release
// itself stands, and waiters fall back to their timers.
func releaseReply(l *Hold, v int64, err error) Reply {
	if err == nil && v == scripts.ReplyUnpublished {
		l.logger.Warn("redlock: released, but the server refused to publish the release message; waiters wake by their timers", "name", l.Name)
	}
	return Reply{OK: err == nil && v != scripts.ReplyNotOurs, Code: v, Err: err}
}
