package engine

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
func (p *Pool) extend(ctx context.Context, l *Hold, ttl time.Duration, deadline time.Time) (rs []Reply, interrupted bool, err error) {
	return p.Round(Detached(ctx), p.Nodes, l.timeout, l.timeout, func(ctx context.Context, n *node.Node, cl node.Client) Reply {
		defer keepCompanions(ctx, cl, l, ttl)
		if l.replicas == 0 {
			v, err := runParts(ctx, cl, l, kinds[l.Kind].extend, ttl, foldExtend)
			return Reply{OK: v == scripts.ReplyOK, Code: v, Err: err}
		}
		s, keys, args := kinds[l.Kind].extend(l, 0, ttl) // one part: LockAll refuses acks over shards
		cmd, ackErr := scriptAcked(ctx, cl, s, keys, int(l.replicas), ackTimeout(l), args...)
		v, err := cmd.Int64()
		if err == nil && v == scripts.ReplyOK && ackErr != nil {
			// Extended on the master only: a failed attempt, not a refusal.
			return Reply{Code: v, Err: ackErr}
		}
		return Reply{OK: v == scripts.ReplyOK, Code: v, Err: err}
	}, deadline, ctx.Done(), p.Settled)
}

// remaining is Lock.TTL (engine).
func (p *Pool) remaining(ctx context.Context, l *Hold) (time.Duration, error) {
	rs, interrupted, err := p.leases(ctx, l)
	if err != nil {
		return 0, err
	}
	t := p.Count(rs)
	if t.OK >= p.Quorum {
		var ttls []time.Duration
		for _, r := range rs {
			if r.Err == nil && r.OK && !p.Nodes[r.Node].IsDup() {
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
		return ttls[p.Quorum-1], nil
	}
	if p.Impossible(t.No) {
		return 0, Say.NotHeld("TTL of", l.Name, p.NotOurs(t))
	}
	return 0, p.ShortOf("TTL of", l.Name, t, "", CtxErrIf(ctx, interrupted))
}

// leases reads l's lease on every node (the pttl scripts): each reply's val
// is a lease in ms (-1: no expiry), or scripts.ReplyNotOurs (gone) or scripts.ReplyOthers
// (another owner's, or a key of another type) with ok false.
func (p *Pool) leases(ctx context.Context, l *Hold) (rs []Reply, interrupted bool, err error) {
	ch, err := p.fanOut(ctx, p.Nodes, l.timeout, l.timeout, func(ctx context.Context, n *node.Node, cl node.Client) Reply {
		v, err := runParts(ctx, cl, l, kinds[l.Kind].pttl, 0, foldPTTL)
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			v, err = scripts.ReplyOthers, nil // a value of another type where the set of holds was
		}
		return Reply{OK: err == nil && v != scripts.ReplyNotOurs && v != scripts.ReplyOthers, val: v, Err: err}
	})
	if err != nil {
		return nil, false, err
	}
	rs, interrupted = gather(ch, p.Nodes, time.Now().Add(l.timeout), ctx.Done(), Never)
	return rs, interrupted, nil
}
