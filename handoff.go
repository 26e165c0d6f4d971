package redlock

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
	c *core
	l *hold // released locally, still ours on the server
	w *waiter
}

// run hands h.l to h.w. It reports done=false when the lock was left
// untouched and the ordinary release must run instead (no token could be
// minted).
func (h handOff) run(ctx context.Context) (done bool, err error) {
	c, l, w := h.c, h.l, h.w
	if w.cfg.replicas > 0 {
		// handoff.lua's grant would reach w without the WAIT its options
		// ask for: w acquires by itself, woken by the ordinary release.
		c.waits.unreserve(l.channel, w, false)
		return false, nil
	}
	nl := (&acquisition{kind: kindExclusive, name: w.name, tag: l.Key(), channel: l.channel, cfg: w.cfg}).newLock(c, len(c.pool.nodes))
	c.track.watch(nl)
	c.track.expect(nl)
	r, until, err := h.call(ctx, nl)
	c.track.settle(nl, err == nil && r.ok)
	if err != nil || !r.ok {
		c.track.unwatch(nl)
	}
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
		c.pool.releaseInBackground(ctx, c.pool.nodes, l, nl)
		c.waits.unreserve(l.channel, w, true)
		return true, say.join(fmt.Errorf("redlock: unlock %q: hand-off outcome unknown; the lock frees itself when its lease ends", l.name), c.pool.nodeErr(r.node, r.err))
	case r.code == scripts.ReplyAlready:
		c.waits.unreserve(l.channel, w, true)
		return true, nil
	case r.code == scripts.ReplyNotOurs:
		c.waits.unreserve(l.channel, w, true) // the key is gone: the name may be free
		return true, say.notHeld("unlock", l.name, errors.New("the key is gone or another owner's"))
	case !r.ok:
		// No token, or scripts.ReplyOOM (a full server refused its first
		// write): the ordinary release runs and reports it.
		c.waits.unreserve(l.channel, w, false)
		return false, nil
	}
	h.deliver(ctx, nl, r.val, until)
	return true, nil
}

// call runs handoff.lua, which releases l and grants nl to waiter w in one
// step, and returns the node's reply and nl's validity, measured from
// before the send.
func (h handOff) call(ctx context.Context, nl *hold) (reply, time.Time, error) {
	p, l, w := h.c.pool, h.l, h.w
	keys, args := handOffArgs(l, nl, w.cfg, w.wid)
	t1 := time.Now()
	until := validUntil(t1, w.cfg.ttl, w.cfg.driftFactor)
	ch, err := p.fanOut(context.WithoutCancel(ctx), p.nodes, l.timeout, l.timeout, func(ctx context.Context, n *node.Node, cl node.Client) reply {
		var again node.TryingAgain
		res, err := scripts.HandOff.Run(ctx, cl, keys, args...).Int64Slice()
		for again.Retry(ctx, err) {
			res, err = scripts.HandOff.Run(ctx, cl, keys, args...).Int64Slice()
		}
		switch {
		case err != nil:
			return reply{err: err}
		case len(res) != 2:
			return reply{err: fmt.Errorf("%w: %v", node.ErrBadReply, res)}
		}
		return reply{ok: res[0] == scripts.ReplyOK, code: res[0], val: res[1]}
	})
	if err != nil {
		return reply{}, until, err
	}
	rs, _ := gather(ch, p.nodes, earliest(t1.Add(l.timeout), until), nil, never)
	return rs[0], until, nil
}

// deliver makes nl, granted with token by handoff.lua, the lock of waiter
// w, unless its validity ran out on the way or w left meanwhile: then nl
// is released (and w, or the waiter after it, tries again).
func (h handOff) deliver(ctx context.Context, nl *hold, token int64, until time.Time) {
	c, w := h.c, h.w
	nl.settle(0, granted)
	if !time.Now().Before(until) {
		nl.finish(stateFailed, "")
		c.pool.releaseOn(ctx, nl, c.pool.nodes, nl.timeout, never)
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
