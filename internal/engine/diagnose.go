package engine

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
// with those nodes' timeouts naming what it heard. It ends when ctx (the
// waiting call's) does, returning errs as they were: a call whose ctx
// ended returns then, not when the diagnosis would have.
func (p *Pool) diagnose(ctx context.Context, errs []error) []error {
	var silent []*node.Node
	for _, e := range errs {
		if i, cause, ok := Say.NodeOf(e); ok && errors.Is(cause, node.ErrTimeout) && p.Nodes[i].LastErr.Load() == nil {
			silent = append(silent, p.Nodes[i])
		}
	}
	if len(silent) == 0 {
		return errs
	}
	ch, err := p.fanOut(ctx, silent, diagnoseLimit, diagnoseLimit, func(ctx context.Context, n *node.Node, cl node.Client) Reply {
		return Reply{Err: scriptPing.Run(ctx, cl, nil).Err()} // noted by fanOut
	})
	if err != nil {
		return errs // Close: no goroutine may start
	}
	gather(ch, silent, time.Now().Add(diagnoseLimit), ctx.Done(), Never)
	if ctxEnded(ctx) != nil {
		return errs // ctx's end cut the gather short, or came with its last reply
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
		if n, cause, ok := Say.NodeOf(e); ok && errors.Is(cause, node.ErrTimeout) {
			out[i] = p.NodeErr(n, p.Nodes[n].TimedOut())
		}
	}
	return out
}

// Ping checks that a quorum of c's nodes answer and accept writes, within
// the node timeout; the error names every node that does not, with its
// cause.
func Ping(ctx context.Context, c *Core) error {
	if c == nil {
		return ErrNoCore
	}
	p, timeout := c.Pool, c.Cfg.Timeout(c.Cfg.TTL)
	call := func(ctx context.Context, n *node.Node, cl node.Client) Reply {
		if err := p.Ids.Identify(ctx, n); err != nil {
			return Reply{Err: err}
		}
		err := scriptPing.Run(ctx, cl, nil).Err()
		return Reply{OK: err == nil, Err: err}
	}
	rs, interrupted, err := p.Round(Detached(ctx), p.Nodes, timeout, timeout, call, time.Now().Add(timeout), ctx.Done(), Never)
	if err != nil {
		return err
	}
	t := p.Count(rs)
	if t.OK >= p.Quorum && !interrupted {
		return nil
	}
	return Say.Join(append(append([]error{fmt.Errorf("redlock: ping: %d of %d nodes answer as writable masters, need %d", t.OK, len(p.Nodes), p.Quorum)}, t.Errs...), CtxErrIf(ctx, interrupted))...)
}
