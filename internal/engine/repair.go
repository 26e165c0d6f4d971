package engine

import (
	"context"
	"time"

	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/scripts"
)

// Lease repair, a Redlock's alone (beyond the Redlock spec). A lock granted
// by a bare quorum (two masters of three, the third unreachable or holding
// a contender's grant for a moment) stays on those masters for its whole
// life, and one of them restarted empty then lets a second client take the
// name; so does a lock on three masters after two single restarts. When a
// renewal round has extended the lock on a quorum of masters within its
// validity, and a master answered that the key is gone there, repair.lua
// sets it there with SET NX: only where the name is free, with our owner
// value, for what is left of the lease the quorum has just renewed, and the
// name's fence counter raised to the lock's token.
//
// What this never does: create a key where another owner's (or a
// reservation) is, since SET NX touches no existing key; count towards a
// quorum, since the round that decides a renewal counts only the masters
// that extended a key that was there; run before the round renewed the lock,
// so a lock that is lost is never put back; outlive the renewed lease. A
// repair that answers after the lock stopped being held (released, lost)
// deletes what it set, as a late grant does (Lock.settle).

// repairable reports whether renewals of l may put its key back: an
// exclusive lock on one name, on a Redlock, without replica acks (a
// repaired key is not one that WAIT has seen replicated).
func (w *watchdog) repairable(l *Hold) bool {
	return len(w.c.Pool.Nodes) > 1 && l.Kind == KindExclusive && parts(l) == 1 && l.replicas == 0
}

// foundGone is told by the call on n of the renewal of l sent at t1 for a
// lease of ttl that the key is gone there: put back now if that round has
// already renewed l, else when it does (repairRenewed).
func (w *watchdog) foundGone(l *Hold, n *node.Node, ttl time.Duration, t1 time.Time) {
	if !w.repairable(l) {
		return
	}
	if l.noteGone(n.Idx, ValidUntil(t1, ttl, l.driftFactor)) {
		w.repair(l, []*node.Node{n}, t1.Add(ttl))
	}
}

// repairRenewed puts l's key back on the masters where the renewal that
// has just renewed it (sent at t1 for ttl) found it gone.
func (w *watchdog) repairRenewed(l *Hold, ttl time.Duration, t1 time.Time) {
	if !w.repairable(l) {
		return
	}
	var buf [inlineNodes]int
	idx := l.takeGone(buf[:0])
	if len(idx) == 0 {
		return
	}
	nodes := make([]*node.Node, len(idx))
	for i, x := range idx {
		nodes[i] = w.c.Pool.Nodes[x]
	}
	w.repair(l, nodes, t1.Add(ttl))
}

// repair sends repair.lua for l to nodes, with the lease left until
// leaseEnd (where the renewed keys expire at the earliest), waiting for
// none of them.
func (w *watchdog) repair(l *Hold, nodes []*node.Node, leaseEnd time.Time) {
	ms := time.Until(leaseEnd).Milliseconds()
	if ms < 1 {
		return
	}
	keys := l.Keys[:2]
	args := []any{l.Owner, ms, "0", int64(0)}
	if l.fencing {
		args[2] = l.Token
		args[3] = max(time.Until(l.counterUntil), time.Duration(ms)*time.Millisecond).Milliseconds()
	}
	if l.Metadata != "" {
		keys = []string{l.Keys[0], l.Keys[1], l.Keys[4]}
		args = append(args, metaValue(l.Owner, l.Metadata))
	}
	_, _ = w.c.Pool.spawn(context.Background(), nodes, l.timeout, l.timeout, func(ctx context.Context, n *node.Node, cl node.Client) Reply {
		v, err := scripts.Sharded(scripts.Repair, l.sharded).Run(ctx, cl, keys, args...).Int64()
		set := err == nil && v == scripts.ReplyOK
		if (set || (err != nil && !node.IsServerError(err))) && !l.is(stateHeld) {
			// Released or lost while the repair was on the way: what it
			// set (or may have set) must not keep the name.
			w.c.Pool.releaseLater(ctx, n, l, set)
		}
		return Reply{OK: set, Err: err}
	})
}
