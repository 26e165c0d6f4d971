package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// releaseReply turns release.lua's reply into a node reply, logging a
// release whose wake-up message the server refused to publish: the release
// itself stands, and waiters fall back to their timers.
func releaseReply(l *Lock, v int64, err error) reply {
	if err == nil && v == replyUnpublished {
		l.logger.Warn("redlock: released, but the server refused to publish the release message; waiters wake by their timers", "name", l.name)
	}
	return reply{ok: err == nil && v != replyNotOurs, code: v, err: err}
}

// unlock releases l on every node where it is still ours; see Lock.Unlock.
func (c *core) unlock(ctx context.Context, l *Lock) error {
	l.mu.Lock()
	prev := l.state
	changed := l.transition(stateReleased, "")
	l.mu.Unlock()
	if changed {
		l.afterTransition(stateReleased)
		if len(c.nodes) == 1 && l.kind == kindExclusive {
			// A goroutine of ours waits for the name: release and grant
			// in one script, no message, no acquire round trip.
			if w := c.waits.reserveHead(l.channel); w != nil {
				if done, err := c.handOff(ctx, l, w); done {
					return err
				}
			}
		}
	} else if prev != stateLost {
		return errAlreadyReleased
	}
	// Every node, the spec's rule: also those whose acquire has not answered
	// yet. The release usually overtakes nothing and frees the name at once;
	// if it does overtake the acquire, the acquire's call releases its own
	// grant when it arrives (settle).
	rs := c.releaseOn(ctx, l, c.nodes, l.timeout, c.settled)
	if !changed {
		// A lost lock may still have our key on some node; the release above
		// cleared it, but the lock was not held.
		return fmt.Errorf("%w: %w", ErrNotHeld, ErrLost)
	}
	t := c.count(rs)
	switch {
	case t.ok >= c.quorum:
		return nil
	case c.impossible(t.no):
		return fmt.Errorf("%w: the key was gone or another owner's on %d of %d nodes", ErrNotHeld, t.no, len(c.nodes))
	}
	return c.shortOf("release", t, "; the lock frees itself when its lease ends", nil)
}

// handOff passes l, just released locally, to w, the head waiter of this
// core, with handoff.lua: one round trip, a fresh owner value and fencing
// token for w, validity measured from before the script was sent, options
// (TTL, renewal, fencing) from w's own Lock call. It reports done=false when
// the lock was left untouched and the ordinary release must run instead
// (no token could be minted).
func (c *core) handOff(ctx context.Context, l *Lock, w *waiter) (done bool, err error) {
	if w.cfg.replicas > 0 {
		// handoff.lua's grant would reach w without the WAIT its options
		// ask for: w acquires by itself, woken by the ordinary release.
		c.waits.unreserve(l.channel, w, false)
		return false, nil
	}
	nl := c.newLock(w.name, l.keys[0], l.channel, w.cfg)
	r, until, err := c.handOffCall(ctx, l, nl, w)
	if err != nil {
		c.waits.unreserve(l.channel, w, true)
		return false, nil
	}
	switch {
	case r.err != nil:
		// Unknown: the name may have passed to nl. Release both owners in
		// the background (each only if still its own), l first: a
		// hand-off that reaches Redis after that release finds l's marker
		// and changes nothing, so nl's release, sent after it, cannot be
		// overtaken by it. Then w tries.
		nl.finish(stateFailed, "")
		c.releaseInBackground(ctx, c.nodes, l, nl)
		c.waits.unreserve(l.channel, w, true)
		return true, errors.Join(fmt.Errorf("redlock: hand-off outcome unknown; the lock frees itself when its lease ends"), c.nodeErr(r.node, r.err))
	case r.code == replyAlready:
		c.waits.unreserve(l.channel, w, true)
		return true, nil
	case r.code == replyNotOurs:
		c.waits.unreserve(l.channel, w, true) // the key is gone: the name may be free
		return true, fmt.Errorf("%w: the key was gone or another owner's", ErrNotHeld)
	case !r.ok:
		// No token, or replyOOM (a full server refused its first
		// write): the ordinary release runs and reports it.
		c.waits.unreserve(l.channel, w, false)
		return false, nil
	}
	c.handTo(ctx, w, nl, r.val, until)
	return true, nil
}

// handOffCall runs handoff.lua, which releases l and grants nl to waiter w
// in one step, and returns the node's reply and nl's validity, measured
// from before the send.
func (c *core) handOffCall(ctx context.Context, l, nl *Lock, w *waiter) (reply, time.Time, error) {
	keys := []string{l.keys[0], l.keys[1], l.keys[3]}
	args := []any{l.owner, nl.owner, ttlMillis(w.cfg.ttl), fenceArg(w.cfg), ttlMillis(l.leaseTTL()), w.wid}
	if nl.metadata != "" {
		keys = append(keys, nl.keys[5])
		args = append(args, metaValue(nl.owner, nl.metadata))
	}
	t1 := time.Now()
	until := validUntil(t1, w.cfg.ttl, w.cfg.driftFactor)
	ch, err := c.fanOut(context.WithoutCancel(ctx), c.nodes, l.timeout, l.timeout, func(ctx context.Context, n *node) reply {
		res, err := scriptHandOff.Run(ctx, n.client, keys, args...).Int64Slice()
		switch {
		case err != nil:
			return reply{err: err}
		case len(res) != 2:
			return reply{err: fmt.Errorf("%w: %v", errBadReply, res)}
		}
		return reply{ok: res[0] == replyOK, code: res[0], val: res[1]}
	})
	if err != nil {
		return reply{}, until, err
	}
	rs, _ := gather(ch, c.nodes, earliest(t1.Add(l.timeout), until), nil, never)
	return rs[0], until, nil
}

// handTo makes nl, granted with token by handoff.lua, the lock of waiter
// w, unless its validity ran out on the way or w left meanwhile: then nl
// is released (and w, or the waiter after it, tries again).
func (c *core) handTo(ctx context.Context, w *waiter, nl *Lock, token int64, until time.Time) {
	nl.settle(0, granted)
	if !time.Now().Before(until) {
		nl.finish(stateFailed, "")
		c.releaseOn(ctx, nl, c.nodes, nl.timeout, never)
		c.waits.unreserve(nl.channel, w, true)
		return
	}
	if err := c.activate(nl, token, until); err != nil {
		c.waits.unreserve(nl.channel, w, false) // closed: activate released nl
		return
	}
	if !c.waits.deliver(w, nl) {
		// w left meanwhile: nobody owns nl. Its release is not this
		// Unlock's outcome (l was released either way); it hands nl to the
		// next waiter.
		if err := nl.Unlock(context.WithoutCancel(ctx)); err != nil {
			nl.logger.Warn("redlock: releasing a lock handed to a waiter that had left failed; it expires with its lease", "name", nl.name, "err", err)
		}
	}
}

// errAlreadyReleased is Unlock's answer on a lock released before.
var errAlreadyReleased = fmt.Errorf("%w: already released", ErrNotHeld)

// releaseOn sends the release script for l to nodes and waits for their
// replies up to timeout, or until stop says enough. Callers use it for
// cleanup, so it runs detached from the caller's cancellation: a cancelled
// caller still releases. After Close, when the core may start no goroutine,
// it releases node by node from the caller's goroutine: a grant that nobody
// will own must not hold the name for a whole lease.
func (c *core) releaseOn(ctx context.Context, l *Lock, nodes []*node, timeout time.Duration, stop func([]reply) bool) []reply {
	if len(nodes) == 0 {
		return nil
	}
	args := releaseArgs(l) // one ARGV for every node: go-redis only reads it
	call := func(ctx context.Context, n *node) reply { return releaseCall(ctx, n.client, l, args) }
	rs, _, err := c.round(detached(ctx), nodes, timeout, l.leaseTTL(), call, time.Now().Add(timeout), nil, stop)
	if err != nil {
		rs = make([]reply, 0, len(nodes))
		for _, n := range nodes {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
			r := call(cctx, n)
			cancel()
			r.node = n.idx
			rs = append(rs, r)
		}
		return rs
	}
	return rs
}

// releaseInBackground releases locks, in order, on each of nodes from a
// goroutine of the core per node, waiting for none: their outcome is
// unknown (the nodes failed or did not answer), and they will not answer
// the release any sooner. A goroutine per node, so that a hung node does not
// keep the others' keys.
func (c *core) releaseInBackground(ctx context.Context, nodes []*node, locks ...*Lock) {
	if len(nodes) == 0 || !c.goCount(len(nodes)) {
		return
	}
	for _, n := range nodes {
		go func() {
			defer c.wg.Done()
			for _, l := range locks {
				c.releaseNode(ctx, n, l)
			}
		}()
	}
}

// releaseOnce releases l on node n, where a grant of l's is known to have
// run (its reply came back late), from a goroutine the core already owns:
// one call, until the lease would end anyway.
func (c *core) releaseOnce(ctx context.Context, n *node, l *Lock) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.leaseTTL())
	defer cancel()
	releaseCall(ctx, n.client, l, releaseArgs(l)) // the key expires by itself if this fails
}

// releaseNode releases l on node n, where a call of l's may have run or may
// still run (its outcome is unknown), from a goroutine the core already
// owns. A paused server, or one behind a stalled link, runs the commands
// waiting in its sockets when it resumes, in no set order across
// connections: a release sent meanwhile may run before the grant or
// renewal it is meant to undo. So it releases until the node answers, and
// when the answer is "not ours", once more: by then the server has run
// every command that was waiting when it answered, and a grant among them
// is ours to delete. Each call is bounded by the node timeout, so a link
// that heals is used within that much (see cleanupClient). It gives up after
// releaseRetryFor (three leases, if longer), or at Close.
func (c *core) releaseNode(ctx context.Context, n *node, l *Lock) {
	ctx = context.WithoutCancel(ctx)
	end := time.Now().Add(max(3*l.leaseTTL(), releaseRetryFor))
	cl := n.cleanupClient(l.timeout)
	answered := false
	for time.Now().Before(end) {
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, l.timeout)
		r := releaseCall(cctx, cl, l, releaseArgs(l))
		cancel()
		switch {
		case r.err == nil && (r.ok || answered):
			return
		case r.err == nil:
			answered = true
			continue
		case isPermanent(r.err):
			return
		}
		select {
		case <-time.After(l.timeout - time.Since(start)):
		case <-c.closing:
			return
		}
	}
}

// releaseRetryFor bounds how long releaseNode keeps trying on a node that
// does not answer: a server paused for longer runs a grant waiting in its
// sockets when it resumes, and that key then lasts one lease.
const releaseRetryFor = 10 * time.Second

// releaseCall runs the release script of l, with args from releaseArgs
// (used by an exclusive lock's release.lua only), on one node's client cl.
func releaseCall(ctx context.Context, cl Client, l *Lock, args []any) reply {
	if l.kind != kindExclusive {
		v, err := l.runParts(ctx, cl, l.releaseCmd, foldRelease)
		return releaseReply(l, v, err)
	}
	v, err := scriptRelease.Run(ctx, cl, l.relKeys(), args...).Int64()
	return releaseReply(l, v, err)
}

// extend moves l's lease to ttl on every node; see Lock.Extend.
func (c *core) extend(ctx context.Context, l *Lock, ttl time.Duration) error {
	l.io.Lock()
	defer l.io.Unlock()
	if err := l.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	t1 := time.Now()
	until := validUntil(t1, ttl, l.driftFactor)
	ch, err := c.fanOut(context.WithoutCancel(ctx), c.nodes, l.timeout, l.timeout, func(ctx context.Context, n *node) reply {
		if l.replicas == 0 {
			v, err := l.runParts(ctx, n.client, func(p int) (*redis.Script, []string, []any) { return l.extendCmd(p, ttl) }, foldExtend)
			return reply{ok: v == replyOK, code: v, err: err}
		}
		s, keys, args := l.extendCmd(0, ttl) // one part: LockAll refuses acks over shards
		cmd, ackErr := scriptAcked(ctx, n.client, s, keys, int(l.replicas), l.ackTimeout(), args...)
		v, err := cmd.Int64()
		if err == nil && v == replyOK && ackErr != nil {
			// Extended on the master only: a failed attempt, not a refusal.
			return reply{code: v, err: ackErr}
		}
		return reply{ok: v == replyOK, code: v, err: err}
	})
	if err != nil {
		return err
	}
	rs, interrupted := gather(ch, c.nodes, earliest(t1.Add(l.timeout), until), ctx.Done(), c.settled)
	t := c.count(rs)
	switch {
	case t.ok >= c.quorum && !interrupted && time.Now().Before(until):
		if !l.renewed(ttl, until) {
			if l.isLost() {
				c.abandon(l) // lost meanwhile: the moved lease must not keep the name
			}
			return fmt.Errorf("%w: %w", ErrNotHeld, l.Err())
		}
		if l.autoRenew {
			c.wd.schedule(l, l.renewAt(t1))
		}
		return nil
	case c.impossible(t.no):
		taken, late := refusalsIn(rs)
		l.lose(refusalReason(t.no, taken, late), nil)
		if t.ok > 0 {
			c.abandon(l) // the masters that moved it must not keep the name
		}
		return fmt.Errorf("%w: %w", ErrNotHeld, l.Err())
	}
	return c.shortOf("extend", t, " within validity; the lock stays held until its current Until", ctxErrIf(ctx, interrupted))
}
