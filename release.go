package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// unlock releases l on every node where it is still ours; see Lock.Unlock.
func (c *core) unlock(ctx context.Context, l *Lock) error {
	l.mu.Lock()
	prev := l.state
	changed := l.transition(stateReleased, "")
	l.mu.Unlock()
	if changed {
		c.ended(l, stateReleased)
		if len(c.pool.nodes) == 1 && l.kind == kindExclusive {
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
	rs := c.pool.releaseOn(ctx, l, c.pool.nodes, l.timeout, c.pool.settled)
	if !changed {
		// A lost lock may still have our key on some node; the release above
		// cleared it, but the lock was not held.
		return fmt.Errorf("%w: %w", ErrNotHeld, ErrLost)
	}
	t := c.pool.count(rs)
	switch {
	case t.ok >= c.pool.quorum:
		return nil
	case c.pool.impossible(t.no):
		return fmt.Errorf("%w: the key was gone or another owner's on %d of %d nodes", ErrNotHeld, t.no, len(c.pool.nodes))
	}
	return c.pool.shortOf("release", t, "; the lock frees itself when its lease ends", nil)
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
	nl := (&acquisition{kind: kindExclusive, name: w.name, tag: l.keys[0], channel: l.channel, cfg: w.cfg}).newLock(c, len(c.pool.nodes))
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
		c.pool.releaseInBackground(ctx, c.pool.nodes, l, nl)
		c.waits.unreserve(l.channel, w, true)
		return true, errors.Join(fmt.Errorf("redlock: hand-off outcome unknown; the lock frees itself when its lease ends"), c.pool.nodeErr(r.node, r.err))
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
	ch, err := c.pool.fanOut(context.WithoutCancel(ctx), c.pool.nodes, l.timeout, l.timeout, func(ctx context.Context, n *node) reply {
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
	rs, _ := gather(ch, c.pool.nodes, earliest(t1.Add(l.timeout), until), nil, never)
	return rs[0], until, nil
}

// handTo makes nl, granted with token by handoff.lua, the lock of waiter
// w, unless its validity ran out on the way or w left meanwhile: then nl
// is released (and w, or the waiter after it, tries again).
func (c *core) handTo(ctx context.Context, w *waiter, nl *Lock, token int64, until time.Time) {
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

// errAlreadyReleased is Unlock's answer on a lock released before.
var errAlreadyReleased = fmt.Errorf("%w: already released", ErrNotHeld)

// releaseRetryFor bounds how long releaseNode keeps trying on a node that
// does not answer: a server paused for longer runs a grant waiting in its
// sockets when it resumes, and that key then lasts one lease.
const releaseRetryFor = 10 * time.Second

// extend moves l's lease to ttl on every node; see Lock.Extend.
func (c *core) extend(ctx context.Context, l *Lock, ttl time.Duration) error {
	l.io.Lock()
	defer l.io.Unlock()
	if err := l.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	t1 := time.Now()
	until := validUntil(t1, ttl, l.driftFactor)
	ch, err := c.pool.fanOut(context.WithoutCancel(ctx), c.pool.nodes, l.timeout, l.timeout, func(ctx context.Context, n *node) reply {
		if l.replicas == 0 {
			v, err := runParts(ctx, n.client, l, kinds[l.kind].extend, ttl, foldExtend)
			return reply{ok: v == replyOK, code: v, err: err}
		}
		s, keys, args := kinds[l.kind].extend(l, 0, ttl) // one part: LockAll refuses acks over shards
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
	rs, interrupted := gather(ch, c.pool.nodes, earliest(t1.Add(l.timeout), until), ctx.Done(), c.pool.settled)
	t := c.pool.count(rs)
	switch {
	case t.ok >= c.pool.quorum && !interrupted && time.Now().Before(until):
		if !c.renewed(l, ttl, until) {
			if l.isLost() {
				c.abandon(l) // lost meanwhile: the moved lease must not keep the name
			}
			return fmt.Errorf("%w: %w", ErrNotHeld, l.Err())
		}
		if l.autoRenew {
			c.wd.schedule(l, l.renewAt(t1))
		}
		return nil
	case c.pool.impossible(t.no):
		taken, late := refusalsIn(rs)
		l.lose(refusalReason(t.no, taken, late), nil)
		if t.ok > 0 {
			c.abandon(l) // the masters that moved it must not keep the name
		}
		return fmt.Errorf("%w: %w", ErrNotHeld, l.Err())
	}
	return c.pool.shortOf("extend", t, " within validity; the lock stays held until its current Until", ctxErrIf(ctx, interrupted))
}
