package redlock

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/scripts"
)

// extend sends l's extend calls to every node, moving its lease to ttl, and
// gathers the replies until the outcome is settled, deadline passes or ctx
// ends (interrupted).
func (p *pool) extend(ctx context.Context, l *hold, ttl time.Duration, deadline time.Time) (rs []reply, interrupted bool, err error) {
	return p.round(detached(ctx), p.nodes, l.timeout, l.timeout, func(ctx context.Context, n *node.Node, cl node.Client) reply {
		defer keepCompanions(ctx, cl, l, ttl)
		if l.replicas == 0 {
			v, err := runParts(ctx, cl, l, kinds[l.kind].extend, ttl, foldExtend)
			return reply{ok: v == scripts.ReplyOK, code: v, err: err}
		}
		s, keys, args := kinds[l.kind].extend(l, 0, ttl) // one part: LockAll refuses acks over shards
		cmd, ackErr := scriptAcked(ctx, cl, s, keys, int(l.replicas), ackTimeout(l), args...)
		v, err := cmd.Int64()
		if err == nil && v == scripts.ReplyOK && ackErr != nil {
			// Extended on the master only: a failed attempt, not a refusal.
			return reply{code: v, err: ackErr}
		}
		return reply{ok: v == scripts.ReplyOK, code: v, err: err}
	}, deadline, ctx.Done(), p.settled)
}

// remaining is Lock.TTL (engine).
func (p *pool) remaining(ctx context.Context, l *hold) (time.Duration, error) {
	rs, interrupted, err := p.leases(ctx, l)
	if err != nil {
		return 0, err
	}
	t := p.count(rs)
	if t.ok >= p.quorum {
		var ttls []time.Duration
		for _, r := range rs {
			if r.err == nil && r.ok && !p.nodes[r.node].IsDup() {
				d := time.Duration(r.val) * time.Millisecond
				if r.val < 0 {
					d = -1 // no expiry: only when someone changed the key by hand
				}
				ttls = append(ttls, d)
			}
		}
		forever := func(d time.Duration) time.Duration {
			if d < 0 {
				return math.MaxInt64
			}
			return d
		}
		// Longest first: the quorum-th is what a quorum still grants.
		slices.SortFunc(ttls, func(a, b time.Duration) int { return cmp.Compare(forever(b), forever(a)) })
		return ttls[p.quorum-1], nil
	}
	if p.impossible(t.no) {
		return 0, say.notHeld("TTL of", l.name, p.notOurs(t))
	}
	return 0, p.shortOf("TTL of", l.name, t, "", ctxErrIf(ctx, interrupted))
}

// leases reads l's lease on every node (the pttl scripts): each reply's val
// is a lease in ms (-1: no expiry), or scripts.ReplyNotOurs (gone) or scripts.ReplyOthers
// (another owner's, or a key of another type) with ok false.
func (p *pool) leases(ctx context.Context, l *hold) (rs []reply, interrupted bool, err error) {
	ch, err := p.fanOut(ctx, p.nodes, l.timeout, l.timeout, func(ctx context.Context, n *node.Node, cl node.Client) reply {
		v, err := runParts(ctx, cl, l, kinds[l.kind].pttl, 0, foldPTTL)
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			v, err = scripts.ReplyOthers, nil // a value of another type where the set of holds was
		}
		return reply{ok: err == nil && v != scripts.ReplyNotOurs && v != scripts.ReplyOthers, val: v, err: err}
	})
	if err != nil {
		return nil, false, err
	}
	rs, interrupted = gather(ch, p.nodes, time.Now().Add(l.timeout), ctx.Done(), never)
	return rs, interrupted, nil
}
