package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/scripts"
)

// Leader election on the lock: a campaign is a Lock call on the election's
// name, so candidates are ordinary waiters (woken by releases, in the
// Locker's fair order), the leader is the lock's holder, its term is the
// lock's fencing token, and leadership ends exactly when the lock stops
// being held (Unlock, loss, Close). Nothing here touches the engine: the
// election adds one script (proclaim.lua) and one channel.

// electionSuffix names the election channel "K:elect" next to the lock key
// K, so that it shares the name's hash tag (and Cluster slot) like every
// key of internal/engine/keys.go's schema. It never changes: observers of two versions
// must hear the same announcements.
const electionSuffix = ":elect"

// Election is a leader election on one name, made by [Locker.Election] or
// [Redlock.Election]. At most one candidate leads at a time: the holder of
// the lock on the name. Its term is the lock's fencing token, strictly
// increasing from one leader to the next, so a resource guarded by a
// [Fence] or [RedisFence] with the term rejects a deposed leader's writes.
//
// An Election holds no connection and no goroutine of its own; Observe
// starts some for as long as its ctx lives. It is safe for concurrent use,
// and several Elections on one name (in one process or many) take part in
// the same election.
type Election struct {
	c       *engine.Core
	name    string
	opts    []Option
	err     error // the election cannot work: nil Locker, empty name, bad option
	key     string
	rel     string // the release channel: a leader's resignation
	elect   string // the election channel: announcements
	timeout time.Duration
}

// Leader is what [Election.Leader] and [Election.Observe] report about the
// leader at one moment. It is a plain value.
type Leader struct {
	// Value is what the leader announced: the value of its Campaign, or of
	// its last Proclaim.
	Value string
	// Term is the leader's fencing token ([Lock.Token]), strictly
	// increasing from one leader to the next. 0 means no leader, or, from
	// Observe, that the observer cannot tell (its connection is down).
	Term int64
	// TTL is the remaining lease of the leader's lock on the server when it
	// was read (on a Redlock: until fewer than a quorum of masters would
	// still hold it). 0 when there is no leader, or when Observe passes on
	// an announcement of a leader that had already gone when it read.
	TTL time.Duration
}

// Election returns the leader election on name, with opts applied to the
// campaigns' locks over the Locker's defaults ([WithTTL] sets how fast a
// crashed leader is replaced, [WithKeyPrefix] where the keys live). It
// never fails: a nil Locker, an empty name or an invalid option make every
// method of the Election return that error (Observe: a closed channel).
func (lk *Locker) Election(name string, opts ...Option) *Election {
	return newElection(lk.core(), name, opts)
}

// Election returns the leader election on name over the Redlock's masters,
// as [Locker.Election] does: the leader holds the lock on a quorum, Leader
// and Observe report what a quorum agrees on.
func (r *Redlock) Election(name string, opts ...Option) *Election {
	return newElection(r.core(), name, opts)
}

func newElection(c *engine.Core, name string, opts []Option) *Election {
	e := &Election{c: c, name: name, opts: slices.Clone(opts)}
	if c != nil && name == "" {
		e.err = errors.New("redlock: empty election name")
		return e
	}
	a, err := engine.Named(c, name, opts)
	if err != nil {
		e.err = err
		return e
	}
	e.key, e.rel, e.elect = a.Tag, a.Channel, a.Tag+electionSuffix
	e.timeout = a.Cfg.Timeout(a.Cfg.TTL)
	return e
}

// usable reports why e cannot be used, or nil.
func (e *Election) usable() error {
	if e == nil {
		return errors.New("redlock: nil *Election")
	}
	return e.err
}

// Campaign waits until the caller leads the election, or ctx ends, and
// returns the leader's lock: an ordinary held lock, always with fencing
// (its Token is the term) and auto-renewal, whatever the options say. Its
// Done closes when leadership is lost (a renewal that fails past its
// Until: the next leader can be elected only after that), its Unlock
// resigns, and Close of the Locker resigns too. value is what Leader and
// Observe report for this leader; it is stored as the lock's metadata
// (WithMetadata), so `redlock status` shows it too.
//
// Candidates wait as [Locker.Lock] callers do: woken by the leader's
// release (in arrival order on a Locker), or when its lease runs out.
// Once elected, Campaign announces the leader (term and value) on the
// election's channel, so observers hear of it within a round trip; that
// announcement is best effort (the leader stands without it, and observers
// read it at the latest when the previous leader's lease would have
// ended).
//
// Errors are those of Lock: ctx ending first gives an error matching
// ErrNotObtained and ctx.Err(); ErrClosed after Close.
func (e *Election) Campaign(ctx context.Context, value string) (*Lock, error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	opts := append(slices.Clip(e.opts), WithFencing(true), WithAutoRenew(true), WithMetadata(value), announced())
	l, err := engine.LockName(ctx, e.c, e.name, opts)
	if err != nil {
		return nil, err
	}
	// Whatever the announcement's fate, the lock is ours: a lost reply must
	// not turn a won election into an error and a name held for a lease.
	_ = e.announce(ctx, l, value, value != "")
	return lockOf(l), nil
}

// Proclaim changes the value that the leader lead announces, keeping its
// term: observers hear {Term, new value} at once. It checks on the server
// that lead still holds the lock, and returns an error matching ErrNotHeld
// if it does not (resigned, lost, or another leader elected). The lock's
// own [Lock.Metadata] keeps the Campaign's value: a Lock's fields do not
// change after it is returned; Leader and Observe report the new one.
//
// Errors also for a nil lead, a lock that is not this election's (another
// name, prefix, Locker or Redlock), a leader that campaigned with an
// empty value (its lock carries no metadata that renewals keep alive, so
// it has no value to change; campaign with a non-empty one), and when
// fewer than a quorum of nodes answer within the node timeout (joined
// with ctx.Err() when ctx ended first).
func (e *Election) Proclaim(ctx context.Context, lead *Lock, value string) error {
	if err := e.usable(); err != nil {
		return err
	}
	l := lead.ref()
	switch {
	case l == nil:
		return errors.New("redlock: proclaim: nil leader lock")
	case l.Eng != engine.Engine(e.c) || l.Kind != engine.KindExclusive || l.Key() != e.key:
		return fmt.Errorf("redlock: proclaim: lock %q is not a leader of election %q", lead.Name(), e.name)
	case lead.Metadata() == "" && value != "":
		return fmt.Errorf("redlock: proclaim on %q: the leader campaigned with an empty value, which it cannot change", e.name)
	}
	if err := l.Err(); err != nil {
		return notHeld("proclaim", e.name, err)
	}
	return e.announce(ctx, l, value, lead.Metadata() != "")
}

// announce runs proclaim.lua for l on every node: value written as the
// lock's metadata (when write) and "<term>.<n>\n<value>" published on the
// election channel, n numbering l's announcements from 1. nil once a quorum
// did it. The number orders them for observers exactly: every master
// publishes each announcement, and one that runs it twice (go-redis's retry
// after a reply that came late) publishes it twice.
func (e *Election) announce(ctx context.Context, l *engine.Hold, value string, write bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	flag := "0"
	if write {
		flag = "1"
	}
	keys := []string{e.key, e.key + scripts.MetaSuffix}
	msg := strconv.FormatInt(l.Token, 10) + "." + strconv.FormatInt(l.Proclaims.Add(1), 10) + "\n" + value
	args := []any{l.Owner, flag, value, e.elect, msg}
	p := e.c.Pool
	// Detached, as every call of the core: gather stops waiting when ctx
	// ends, and the call left behind is bounded by the node timeout.
	rs, interrupted, err := p.Round(engine.Detached(ctx), p.Nodes, e.timeout, e.timeout, func(ctx context.Context, n *node.Node, cl node.Client) engine.Reply {
		v, err := scripts.Proclaim.Run(ctx, cl, keys, args...).Int64()
		if err != nil {
			return engine.Reply{Err: err}
		}
		return engine.Reply{OK: v == scripts.ReplyOK || v == scripts.ReplyUnpublished, Code: v}
	}, time.Now().Add(e.timeout), ctx.Done(), p.Settled)
	if err != nil {
		return err
	}
	switch t := p.Count(rs); {
	case t.OK >= p.Quorum && !interrupted:
		return nil
	case p.Impossible(t.No):
		return notHeld("proclaim", e.name, p.NotOurs(t))
	default:
		return p.ShortOf("proclaim", e.name, t, "", engine.CtxErrIf(ctx, interrupted))
	}
}

// Leader reports the current leader without campaigning, in one round trip
// of a read-only script per node (as [Locker.Inspect]): its value, term and
// remaining lease. On a Redlock it is the leader a quorum of masters agrees
// on. It returns an error matching ErrNoLeader when nobody leads (the name
// is free, or a release has just passed it to a waiting candidate that has
// not taken it yet), and other errors as Inspect does (no quorum of
// answers within the node timeout, ctx ended, ErrClosed).
//
// What it reports may be out of date as soon as it returns: a leader
// decides by its own lock ([Lock.Done], [Lock.Err]) and fences by its
// term, never by what Leader said.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if err := e.usable(); err != nil {
		return Leader{}, err
	}
	return e.read(ctx)
}

// read is Leader: inspect.lua on every node, judged by quorum as Inspect
// does.
func (e *Election) read(ctx context.Context) (Leader, error) {
	h, rs, err := inspectKey(ctx, e.c, "leader", e.name, e.key, e.timeout)
	if err != nil {
		return Leader{}, err
	}
	if !h.Held || h.Owner == "" || strings.HasPrefix(h.Owner, scripts.ReservedPrefix) {
		return Leader{}, &opError{msg: fmt.Sprintf("redlock: election %q: no leader", e.name), sentinel: ErrNoLeader}
	}
	return Leader{Value: h.Metadata, Term: termOf(e.c.Pool, rs, h.Owner), TTL: h.TTL}, nil
}

// termOf is the fencing token of the lock owner holds: the largest counter
// among the nodes whose key holds owner. A node's counter moves only when
// its key is granted (or raised by a Redlock winner, which needs owner's
// key gone from a majority), so while owner's key is there the counter is
// owner's token, or, on a master that minted less than the quorum's
// largest and was not written back, lower: the largest of them is the
// token whenever the master that minted it answered. (Inspect's Token is
// the largest counter of any answering node, which on a Redlock can be a
// failed attempt's on a minority.)
func termOf(p *engine.Pool, rs []engine.Reply, owner string) int64 {
	var term int64
	for _, r := range rs {
		if r.Err == nil && r.Inspected != nil && r.Inspected.Owner == owner && !p.Nodes[r.Node].IsDup() {
			term = max(term, r.Inspected.Token)
		}
	}
	return term
}
