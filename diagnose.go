package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/node"
)

// scriptPing answers 1 on a writable master only: Redis 7 refuses a script
// with a shebang and without the no-writes flag on a replica (READONLY)
// before running it. A script, since Client has no other way to send a
// command to a Cluster's or Ring's node that holds keys.
var scriptPing = redis.NewScript("#!lua\nreturn 1")

// diagnoseLimit bounds the one call per silent node that diagnose makes:
// long enough for go-redis's own dial retries (5, 100ms apart).
const diagnoseLimit = 2 * time.Second

// diagnose finds out, before a wait gives up on nodes that never answered
// in time, why they did not: a node timeout shorter than go-redis's dial
// retries hides a refused connection behind "no reply". It makes one call
// with a longer bound on each node whose cause is unknown, and returns errs
// with those nodes' timeouts naming what it heard.
func (p *pool) diagnose(errs []error) []error {
	var silent []*node.Node
	for _, e := range errs {
		if i, cause, ok := say.nodeOf(e); ok && errors.Is(cause, node.ErrTimeout) && p.nodes[i].LastErr.Load() == nil {
			silent = append(silent, p.nodes[i])
		}
	}
	if len(silent) == 0 {
		return errs
	}
	ch, err := p.fanOut(context.Background(), silent, diagnoseLimit, diagnoseLimit, func(ctx context.Context, n *node.Node, cl node.Client) reply {
		return reply{err: scriptPing.Run(ctx, cl, nil).Err()} // noted by fanOut
	})
	if err != nil {
		return errs // Close: no goroutine may start
	}
	gather(ch, silent, time.Now().Add(diagnoseLimit), nil, never)
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
		if n, cause, ok := say.nodeOf(e); ok && errors.Is(cause, node.ErrTimeout) {
			out[i] = p.nodeErr(n, p.nodes[n].TimedOut())
		}
	}
	return out
}

// ping checks that a quorum of c's nodes answer and accept writes, within
// the node timeout; the error names every node that does not, with its
// cause.
func ping(ctx context.Context, c *core) error {
	if c == nil {
		return errNoCore
	}
	p, timeout := c.pool, c.cfg.timeout(c.cfg.ttl)
	call := func(ctx context.Context, n *node.Node, cl node.Client) reply {
		if err := p.ids.identify(ctx, n); err != nil {
			return reply{err: err}
		}
		err := scriptPing.Run(ctx, cl, nil).Err()
		return reply{ok: err == nil, err: err}
	}
	rs, interrupted, err := p.round(detached(ctx), p.nodes, timeout, timeout, call, time.Now().Add(timeout), ctx.Done(), never)
	if err != nil {
		return err
	}
	t := p.count(rs)
	if t.ok >= p.quorum && !interrupted {
		return nil
	}
	return say.join(append(append([]error{fmt.Errorf("redlock: ping: %d of %d nodes answer as writable masters, need %d", t.ok, len(p.nodes), p.quorum)}, t.errs...), ctxErrIf(ctx, interrupted))...)
}
