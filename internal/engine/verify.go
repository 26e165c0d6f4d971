package engine

import (
	"cmp"
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/scripts"
)

// Verifier reads, for the tracker, the leases of locks it heard changed from
// outside, and loses those no longer ours: the seam between the tracker,
// which knows nothing of the quorum, and the pool. DataDone is the
// tracker's, told how a read on its data connection ended; abandon is the
// core's, which releases a lost lock's key everywhere.
type Verifier struct {
	Pool     *Pool
	DataDone func(cl node.Client, err error)
	Abandon  func(l *Hold)
}

// Verify reads locks that the tracker heard changed from outside, or arms
// (the pttl scripts, one pipeline per node, on via[node] where it is not
// nil, a tracking data connection, whose read arms them); later: a lock is
// still being acquired, to be read once it is held. One no longer ours on
// so many nodes that a quorum is out of reach is lost now, taken when every
// refusing node holds another owner's value, else deleted (or quorum on a
// mix); when the reads went over data connections (via), only once a read
// through the nodes' own clients says so too. A read that fails decides
// nothing: the renewals go on; failed says which locks were not read (nor
// armed) on a data connection of via.
func (v *Verifier) Verify(locks []*Hold, via []node.Client) (later, failed []bool) {
	later, failed = make([]bool, len(locks)), make([]bool, len(locks))
	var read []*Hold
	var at []int
	var timeout time.Duration
	for i, l := range locks {
		switch {
		case l.is(stateAcquiring):
			later[i] = true
		case l.is(stateHeld):
			read, at = append(read, l), append(at, i)
			timeout = max(timeout, l.timeout)
		}
	}
	if len(read) == 0 {
		return later, failed
	}
	rs, rows, err := v.read(read, via, timeout)
	if err != nil {
		for _, i := range at {
			failed[i] = via != nil
		}
		return later, failed
	}
	lrs := make([]Reply, 0, len(rs))
	var confirm []*Hold
	for j, l := range read {
		lrs = lrs[:0]
		for _, r := range rs {
			// Only a node that answered wrote its row: one still on its
			// way must not be read.
			if r.Err == nil && rows[r.Node] != nil {
				lr := rows[r.Node][j]
				lr.Node = r.Node
				lrs = append(lrs, lr)
				failed[at[j]] = failed[at[j]] || lr.Err != nil && via != nil && via[r.Node] != nil
			} else {
				lrs = append(lrs, Reply{Node: r.Node, Err: Say.Join(r.Err, node.ErrTimeout)})
				failed[at[j]] = failed[at[j]] || via != nil && via[r.Node] != nil
			}
		}
		switch t := v.Pool.Count(lrs); {
		case !v.Pool.Impossible(t.No):
		case via != nil:
			// A data connection said so: confirm through the node's own
			// client before the lock is lost. A data connection can be
			// left on a server that is no longer the master (a Sentinel
			// failover, until the keeper moves it), where the key written
			// on the new master is not yet, and a loss is decided by the
			// connections the writes go through.
			confirm = append(confirm, l)
		default:
			v.lose(l, lrs, t)
		}
	}
	if len(confirm) > 0 {
		v.Verify(confirm, nil)
	}
	return later, failed
}

// read reads the leases of locks on every node, on via[node] where it is
// not nil, and gathers the nodes' answers for up to timeout: rows[node] is
// that node's per-lock replies once it has answered.
func (v *Verifier) read(locks []*Hold, via []node.Client, timeout time.Duration) (rs []Reply, rows [][]Reply, err error) {
	p := v.Pool
	rows = make([][]Reply, len(p.Nodes))
	ch, err := p.fanOut(context.Background(), p.Nodes, timeout, timeout, func(ctx context.Context, n *node.Node, cl node.Client) Reply {
		if via != nil && via[n.Idx] != nil {
			cl = via[n.Idx]
		}
		row, err := readLeases(ctx, cl, locks)
		if via != nil && via[n.Idx] != nil {
			v.DataDone(cl, err)
		}
		rows[n.Idx] = row
		return Reply{Err: err}
	})
	if err != nil {
		return nil, nil, err
	}
	rs, _ = gather(ch, p.Nodes, time.Now().Add(timeout), nil, Never)
	return rs, rows, nil
}

// lose loses l, which the leases read in rs (tallied in t) say is no longer
// ours on so many nodes that a quorum is out of reach (verify).
func (v *Verifier) lose(l *Hold, rs []Reply, t tally) {
	taken := 0
	for _, r := range rs {
		if r.Err == nil && r.val == scripts.ReplyOthers {
			taken++
		}
	}
	if l.lose(refusalReason(t.No, taken, 0), nil) && t.OK > 0 {
		v.Abandon(l) // the nodes still holding it must not keep the name
	}
}

// readLeases reads the lease of every lock on cl (the pttl scripts, in one
// pipeline, again with EVAL those that found no script): per lock, a
// reply as pool.leases makes them; the error is the first, when no reply
// came.
func readLeases(ctx context.Context, cl node.Client, locks []*Hold) ([]Reply, error) {
	p := pipelined{locks: locks, read: true}
	p.send(ctx, cl)
	var perr error
	out := make([]Reply, len(locks))
	errs := make([]error, len(locks))
	vals := make([]int64, len(locks))
	for _, s := range p.cmds {
		if errs[s.lock] != nil {
			continue
		}
		v, err := s.cmd.Int64()
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			v, err = scripts.ReplyOthers, nil // a value of another type where the set of holds was
		}
		if err != nil {
			errs[s.lock] = err
			perr = cmp.Or(perr, err)
			continue
		}
		vals[s.lock] = foldPTTL(vals[s.lock], v, s.part == 0)
	}
	answered := false
	for i := range out {
		if errs[i] != nil {
			out[i] = Reply{Err: errs[i]}
			continue
		}
		answered = true
		v := vals[i]
		out[i] = Reply{OK: v != scripts.ReplyNotOurs && v != scripts.ReplyOthers, val: v}
	}
	if answered {
		perr = nil
	}
	return out, perr
}
