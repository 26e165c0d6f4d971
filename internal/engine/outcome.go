package engine

import (
	"slices"
	"sync"
	"time"

	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/scripts"
)

// outcome is how one node answered a lock's acquire call. A Lock keeps one
// per node: they say where its release goes (sentTo), what a failed attempt
// withdraws (fail), whether a reply that comes late releases its own grant
// (settle), and where a renewal found the key gone (noteGone, takeGone).
type outcome uint8

const (
	pending outcome = iota // no reply yet
	granted
	taken  // another owner holds it: nothing of ours there
	failed // an error: the script may or may not have run
	// gone: once held, a renewal found the key gone there, and the lock
	// is to be put back if the name is free (repair.go).
	gone
	// unsent: the acquire call was not sent, the node being silent
	// (node.admit): nothing of ours there, and nothing to release.
	unsent
)

// settle records that node idx's acquire call returned, and reports whether its
// goroutine must release what it may have set: a grant, or an error whose
// outcome is unknown, that arrived after the lock stopped being live. Unlock
// and failed attempts change the state before they send their releases, so
// a grant their release overtook is still released, by this call.
func (l *Hold) settle(idx int, o outcome) (release bool) {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	l.outcome[idx] = o
	if o == taken || o == unsent {
		// Nothing of ours there: a deferred release is done.
		l.rel.done(idx, Reply{Code: scripts.ReplyNotOurs, unsent: o == unsent})
	}
	if o == granted && l.state == stateReleased && !l.rel.sentOrDeferred(idx) {
		// Unlock's release to this node is still to be sent: it reaches
		// the node after this grant ran there, and finds it (a healthy
		// Redlock's stragglers are not released twice). A node Unlock
		// deferred to this call (releaseTo) is not one: below, this call
		// releases it.
		return false
	}
	return o != taken && o != unsent && l.state != stateAcquiring && l.state != stateHeld
}

// releasesSent notes that a release of each of locks is being sent to node
// idx, as Close's batch does: a straggler's grant that reaches the node after
// it releases itself (settle) instead of holding the name for its lease.
func releasesSent(locks []*Hold, idx int) {
	for _, l := range locks {
		l.rel.sent(idx)
	}
}

// release marks l released (Unlock); wasLost reports a lock that was lost
// before.
func (l *Hold) release() (changed, wasLost bool) {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	wasLost = l.state == stateLost
	return l.transition(stateReleased, ""), wasLost
}

// fail ends an attempt that did not get the lock, and reports on which of
// nodes its acquire call granted, and where the outcome is unknown (the
// call failed or has not answered).
func (l *Hold) fail(nodes []*node.Node) (grantedOn, unknownOn []*node.Node) {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	l.transition(stateFailed, "")
	for _, n := range nodes {
		switch l.outcome[n.Idx] {
		case granted:
			grantedOn = append(grantedOn, n)
		case failed, pending:
			unknownOn = append(unknownOn, n)
		}
	}
	return grantedOn, unknownOn
}

// hold makes a granted attempt a held lock, and returns when the loss
// clock is to declare it lost. With in, l takes over that lease (a
// hand-off that kept the key's expiry): its end and its guard, which
// belong to the grant or renewal that set the expiry; until is then in's.
func (l *Hold) hold(token int64, until time.Time, in *inherited) (lossAt time.Time) {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	l.Token = token
	l.state = stateHeld
	l.Until = until
	if in != nil {
		l.guard = in.guard
	} else {
		l.setGuard()
	}
	if l.obs != nil || l.maxHold > 0 {
		l.acquired = time.Now()
	}
	if l.maxHold > 0 {
		l.holdEnd = l.acquired.Add(l.maxHold)
	}
	return l.lossAt()
}

// noteGone records that the renewal whose validity is until found l's key
// gone on node idx, and reports whether that renewal has already renewed
// l (its Until is until): then the key is to be put back there now, else
// once it does (takeGone).
func (l *Hold) noteGone(idx int, until time.Time) (now bool) {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	if l.state != stateHeld {
		return false
	}
	if l.Until.Equal(until) {
		l.outcome[idx] = granted // put back now: released with the others
		return true
	}
	l.outcome[idx] = gone
	return false
}

// releaseTo returns the nodes of nodes where Unlock's release is to go
// (see outcomes.releaseTo), followed by those deferred to their acquire
// call: Unlock's round waits for the release that call makes
// (releases.await), and counts it.
func (l *Hold) releaseTo(nodes []*node.Node) []*node.Node {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	l.rel.mu.Lock()
	defer l.rel.mu.Unlock()
	return l.rel.deferred(nodes, l.outcome.releaseTo(nodes, &l.rel.deferredTo))
}

// takeGone appends to buf the nodes noted gone (noteGone) and forgets
// them: a repair is sent to each once; a node where it did not take is
// found gone again by the next renewal.
func (l *Hold) takeGone(buf []int) []int {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	for i, o := range l.outcome {
		if o == gone {
			buf = append(buf, i)
			l.outcome[i] = granted
		}
	}
	return buf
}

// outcomes are a lock's per-node outcomes (Lock.outcome, under its mu).
type outcomes []outcome

// releaseTo returns the nodes of nodes where a release is to go now: those
// whose acquire call answered and may have written something (a grant, an
// error). A node whose call has not answered yet is marked in deferred and
// gets its release from that call when it does (Lock.settle): sent now, it
// could run there before the grant, or before go-redis's retry of it after
// a lost reply, and would have to be sent again. Not those the call was not
// sent to (a silent master, node.admit) or that said another owner holds
// the name: nothing of ours is there. nodes itself when that is all of them.
func (os outcomes) releaseTo(nodes []*node.Node, deferred *uint64) []*node.Node {
	now := func(n *node.Node) bool { o := os[n.Idx]; return o != pending && o != unsent && o != taken }
	if !slices.ContainsFunc(nodes, func(n *node.Node) bool { return !now(n) }) {
		return nodes
	}
	out := make([]*node.Node, 0, len(nodes))
	for _, n := range nodes {
		switch {
		case now(n), os[n.Idx] == pending && n.Idx >= 64: // beyond the mask: sent now
			out = append(out, n)
		case os[n.Idx] == pending:
			*deferred |= 1 << n.Idx
		}
	}
	return out
}

// releases is where a lock's releases stand: sentTo has a bit for each node
// a release of the lock was sent to; deferredTo one for each node whose
// release Unlock left to the node's acquire call, until that release is
// done; wait holds, by node, the channel its first answer reaches Unlock's
// round by (nil without any deferred node). Its own mu: taken after the
// lock's mu when both are (settle, releaseTo).
type releases struct {
	mu         sync.Mutex
	sentTo     uint64
	deferredTo uint64
	wait       []chan Reply
}

// sent notes that a release is being sent to node idx (see Lock.settle).
func (r *releases) sent(idx int) {
	if idx >= 64 {
		return
	}
	r.mu.Lock()
	r.sentTo |= 1 << idx
	r.mu.Unlock()
}

// sentOrDeferred reports whether Unlock's release of node idx was sent or
// left to the node's acquire call (beyond the masks: as if sent).
func (r *releases) sentOrDeferred(idx int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return idx >= 64 || (r.sentTo|r.deferredTo)&(1<<idx) != 0
}

// deferred makes a channel for each node of nodes whose release was deferred
// (under mu), and returns now with those nodes after it.
func (r *releases) deferred(nodes, now []*node.Node) []*node.Node {
	if r.deferredTo == 0 {
		return now
	}
	r.wait = make([]chan Reply, len(nodes))
	for _, n := range nodes {
		if n.Idx < 64 && r.deferredTo&(1<<n.Idx) != 0 {
			r.wait[n.Idx] = make(chan Reply, 1)
			now = append(now, n)
		}
	}
	return now
}

// await returns where node idx's deferred release will be handed over
// (done), or nil for a node whose release is not deferred.
func (r *releases) await(idx int) <-chan Reply {
	r.mu.Lock()
	defer r.mu.Unlock()
	if idx >= len(r.wait) {
		return nil
	}
	return r.wait[idx]
}

// done hands the first answer of a release on node idx to Unlock's round
// if that release was deferred to the acquire call: the one answer, so the
// channel never blocks.
func (r *releases) done(idx int, rep Reply) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if idx < 64 && idx < len(r.wait) && r.wait[idx] != nil && r.deferredTo&(1<<idx) != 0 {
		r.deferredTo &^= 1 << idx
		r.wait[idx] <- rep
	}
}
