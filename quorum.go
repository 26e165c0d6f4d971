package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// gather reads replies from ch until stop says enough, every node answered,
// the deadline passed, or done closed. Nodes that did not answer get an
// errNodeTimeout reply. It reports whether done ended the wait.
func gather(ch <-chan reply, nodes []*node, deadline time.Time, done <-chan struct{}, stop func([]reply) bool) (got []reply, interrupted bool) {
	got = make([]reply, 0, len(nodes))
	// Replies already there (an inline call) need no timer.
	for len(got) < len(nodes) && len(ch) > 0 && !stop(got) {
		got = append(got, <-ch)
	}
	if len(got) == len(nodes) || stop(got) {
		return got, false
	}
	t := getTimer(time.Until(deadline))
	defer putTimer(t)
	for len(got) < len(nodes) && !stop(got) {
		select {
		case r := <-ch:
			got = append(got, r)
		case <-t.C:
			for _, n := range nodes {
				if _, ok := replyOf(got, n.idx); !ok {
					got = append(got, reply{node: n.idx, err: errNodeTimeout})
				}
			}
			return got, false
		case <-done:
			return got, true
		}
	}
	return got, false
}

// timers recycles gather's timers: most rounds end by a reply, not by the
// deadline, and a timer that never fired can be reset and used again.
var timers sync.Pool

func getTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// putTimer stops t and keeps it only when it had not fired: then nothing was
// or will be sent on t.C, so a later user cannot receive a stale tick even
// under the pre-Go 1.23 timer semantics (GODEBUG=asynctimerchan=1).
func putTimer(t *time.Timer) {
	if t.Stop() {
		timers.Put(t)
	}
}

// never is a gather stop function that waits for every node.
func never([]reply) bool { return false }

func replyOf(rs []reply, idx int) (reply, bool) {
	for _, r := range rs {
		if r.node == idx {
			return r, true
		}
	}
	return reply{}, false
}

// tally counts the replies of one round.
type tally struct {
	ok, no, failed, permanent int
	errs                      []error
}

// count tallies replies. A node found to be a second address of another
// node's server never counts as a yes: one server must not cast two votes.
func (c *core) count(rs []reply) tally {
	var t tally
	for _, r := range rs {
		err := r.err
		if err == nil && c.nodes[r.node].isDup() {
			err = errDuplicate
		}
		switch {
		case err != nil:
			t.failed++
			if isPermanent(err) {
				t.permanent++
			}
			t.errs = append(t.errs, c.nodeErr(r.node, err))
		case r.ok:
			t.ok++
		default:
			t.no++
		}
	}
	return t
}

// shortOf is the one error of a round that reached too few nodes: what op
// reached, then, joined, every node's error and, when the caller's ctx
// ended the wait (ctxErr not nil), that. after is said behind the count
// ("; the lock frees itself when its lease ends").
func (c *core) shortOf(op string, t tally, after string, ctxErr error) error {
	errs := make([]error, 0, len(t.errs)+2)
	errs = append(errs, fmt.Errorf("redlock: %s reached %d of %d nodes, need %d%s", op, t.ok, len(c.nodes), c.quorum, after))
	errs = append(errs, t.errs...)
	if ctxErr != nil {
		errs = append(errs, ctxErr)
	}
	return errors.Join(errs...)
}

// ctxErrIf is ctx.Err() when interrupted says the ctx ended a round's wait.
func ctxErrIf(ctx context.Context, interrupted bool) error {
	if interrupted {
		return ctx.Err()
	}
	return nil
}

// settled reports that the outcome of a round is decided: a quorum said yes,
// or so many said no or failed that a quorum of yes is out of reach.
func (c *core) settled(rs []reply) bool {
	t := c.count(rs)
	return t.ok >= c.quorum || c.impossible(t.no+t.failed)
}

// impossible reports that a quorum of yes can no longer be reached from the
// nodes that said no (or failed) in this round.
func (c *core) impossible(no int) bool { return no > len(c.nodes)-c.quorum }

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
