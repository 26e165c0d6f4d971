package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/scripts"
)

// handOff passes a lock that an Unlock of this core has just released
// locally to w, the first live waiter of this core for the name, with
// handoff.lua: one round trip, a fresh owner value and fencing token for
// w, validity measured from before the script was sent, options (TTL,
// renewal, fencing) from w's own Lock call. Only a Locker's exclusive locks
// are handed off (kindOps.handsOff).
type handOff struct {
	c *Core
	l *Hold // released locally, still ours on the server
	w *waiter
}

// run hands h.l to h.w. It reports done=false when the lock was left
// untouched and the ordinary release must run instead (no token could be
// minted).
func (h handOff) run(ctx context.Context) (done bool, err error) {
	c, l, w := h.c, h.l, h.w
	if w.cfg.Replicas > 0 {
		// handoff.lua's grant would reach w without the WAIT its options
		// ask for: w acquires by itself, woken by the ordinary release.
		c.Waits.unreserve(l.Channel, w, false)
		return false, nil
	}
	nl := (&Acquisition{Kind: KindExclusive, Name: w.name, Tag: l.Key(), Channel: l.Channel, Cfg: w.cfg}).newLock(c, len(c.Pool.Nodes))
	c.Track.watch(nl)
	c.Track.expect(nl)
	r, until, in, err := h.call(ctx, nl)
	c.Track.settle(nl, err == nil && r.OK)
	if err != nil || !r.OK {
		c.Track.unwatch(nl)
	}
	if err != nil {
		c.Waits.unreserve(l.Channel, w, true)
		return false, nil
	}
	switch {
	case r.Err != nil:
		// Unknown: the name may have passed to nl. Release both owners in
		// the background (each only if still its own), l first: a
		// hand-off that reaches Redis after that release finds l's marker
		// and changes nothing, so nl's release, sent after it, cannot be
		// overtaken by it. Then w tries.
		nl.finish(stateFailed, "")
		c.Pool.releaseInBackground(ctx, c.Pool.Nodes, l, nl)
		c.Waits.unreserve(l.Channel, w, true)
		return true, Say.Join(fmt.Errorf("redlock: unlock %q: hand-off outcome unknown; the lock frees itself when its lease ends", l.Name), c.Pool.NodeErr(r.Node, r.Err))
	case r.Code == scripts.ReplyAlready:
		c.Waits.unreserve(l.Channel, w, true)
		return true, nil
	case r.Code == scripts.ReplyNotOurs:
		c.Waits.unreserve(l.Channel, w, true) // the key is gone: the name may be free
		return true, Say.NotHeld("unlock", l.Name, errors.New("the key is gone or another owner's"))
	case !r.OK:
		// No token, or scripts.ReplyOOM (a full server refused its first
		// write): the ordinary release runs and reports it.
		c.Waits.unreserve(l.Channel, w, false)
		return false, nil
	}
	h.deliver(ctx, nl, r.val, until, in)
	return true, nil
}

// call runs handoff.lua, which releases l and grants nl to waiter w in one
// step, and returns the node's reply and nl's validity: measured from
// before the send, or, when nl takes over l's lease (in), that lease's.
func (h handOff) call(ctx context.Context, nl *Hold) (Reply, time.Time, *inherited, error) {
	p, l, w := h.c.Pool, h.l, h.w
	t1 := time.Now()
	in := h.inherit(nl, t1)
	keys, args := handOffArgs(l, nl, w.cfg, w.WID, in != nil)
	until := ValidUntil(t1, w.cfg.TTL, w.cfg.DriftFactor)
	if in != nil {
		until = in.until
	}
	ch, err := p.fanOut(context.WithoutCancel(ctx), p.Nodes, l.timeout, l.timeout, func(ctx context.Context, n *node.Node, cl node.Client) Reply {
		var again node.TryingAgain
		res, err := scripts.HandOff.Run(ctx, cl, keys, args...).Int64Slice()
		for again.Retry(ctx, err) {
			res, err = scripts.HandOff.Run(ctx, cl, keys, args...).Int64Slice()
		}
		switch {
		case err != nil:
			return Reply{Err: err}
		case len(res) != 2:
			return Reply{Err: fmt.Errorf("%w: %v", node.ErrBadReply, res)}
		}
		return Reply{OK: res[0] == scripts.ReplyOK, Code: res[0], val: res[1]}
	})
	if err != nil {
		return Reply{}, until, in, err
	}
	rs, _ := gather(ch, p.Nodes, earliest(t1.Add(l.timeout), until), nil, Never)
	return rs[0], until, in, nil
}

// inherited is a lease that a hand-off passes on as it stands (the key
// keeps its expiry): its validity and guard, those of the grant or renewal
// that set the expiry, and when its renewal is due.
type inherited struct {
	until, renewAt time.Time
	guard          time.Duration
}

// inherit returns l's lease for nl to take over, or nil when nl needs a
// lease of its own. A waiter that renews a lease of the TTL and drift
// allowance of l's takes l's over while that lease's renewal, at nl's
// interval from its send, is at least a node timeout away (the hand-off's
// reply then comes first): the script leaves the key's expiry alone, one
// command less per hand-off, and nl's watchdog renews then. A waiter that
// does not renew keeps a lease of its own TTL from the Unlock, as its own
// acquire would give. The key's expiry is never later than a fresh lease's
// would be (the TTL is the same, set earlier), so the name is not held any
// longer for a waiter that crashes. The fence counter outlives the lease:
// l's grant and renewals gave it the lease's life at least, and the
// hand-off's mint the retention from now.
func (h handOff) inherit(nl *Hold, t1 time.Time) *inherited {
	l, cfg := h.l, h.w.cfg
	if !cfg.AutoRenew {
		return nil
	}
	// An Extend or renewal of l still on the wire (it holds IO until its
	// reply) may yet set another expiry than l's lease says: none is
	// passed on then. None can start after this: l is released, which
	// each checks once it holds IO.
	if !l.IO.TryLock() {
		return nil
	}
	l.IO.Unlock()
	l.Mu.Lock()
	le := l.lease
	l.Mu.Unlock()
	if le.unsure || le.ttl != cfg.TTL || le.driftFactor != cfg.DriftFactor || le.Until.IsZero() {
		return nil
	}
	due := renewAt(nl, sentAt(le.Until, le.ttl, le.driftFactor))
	if due.Sub(t1) < l.timeout {
		return nil
	}
	return &inherited{until: le.Until, renewAt: due, guard: le.guard}
}

// deliver makes nl, granted with token by handoff.lua, the lock of waiter
// w, unless its validity ran out on the way or w left meanwhile: then nl
// is released (and w, or the waiter after it, tries again).
func (h handOff) deliver(ctx context.Context, nl *Hold, token int64, until time.Time, in *inherited) {
	c, w := h.c, h.w
	nl.settle(0, granted)
	if !time.Now().Before(until) {
		nl.finish(stateFailed, "")
		c.Pool.releaseOn(ctx, nl, c.Pool.Nodes, nl.timeout, Never)
		c.Waits.unreserve(nl.Channel, w, true)
		return
	}
	if err := c.activate(nl, token, until, in); err != nil {
		c.Waits.unreserve(nl.Channel, w, false) // closed: activate released nl
		return
	}
	if !c.Waits.deliver(w, nl) {
		// w left meanwhile: nobody owns nl. Its release is not this
		// Unlock's outcome (l was released either way); it hands nl to the
		// next waiter.
		if err := nl.Unlock(context.WithoutCancel(ctx)); err != nil {
			nl.logger.Warn("redlock: releasing a lock handed to a waiter that had left failed; it expires with its lease", "name", nl.Name, "err", err)
		}
	}
}
