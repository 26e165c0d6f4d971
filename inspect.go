package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/scripts"
)

// Holder is what [Locker.Inspect] and [Redlock.Inspect] found about a lock
// name at one moment. It is a plain value: it does not change when the lock
// does.
type Holder struct {
	// Held reports whether the name is held: on a Locker, whether the lock
	// key exists or read holds are live; on a Redlock, whether a quorum of
	// masters agrees on one owner.
	Held bool
	// Owner is the owner value of the writer/exclusive holder ([Lock.Owner]),
	// "" if none, or "queued:<id>" for the moment (at most the releaser's
	// node timeout, and never past the lease) a release
	// has reserved the name for a queued waiter that has yet to take it.
	Owner string
	// TTL is the remaining lease on the server: 0 when the name is free, and
	// negative when the lock key has no expiry (a key this library did not
	// write); while only read holds hold it, the longest of their leases. On
	// a Redlock it is the time until fewer than a quorum of masters would
	// still hold the key.
	TTL time.Duration
	// Token is the last fencing token issued for the name, 0 if none yet,
	// with fencing off, or once the name's counter expired after its
	// retention ([WithFenceRetention]). It stays after a release: the next
	// holder gets a larger one.
	Token int64
	// Metadata is what the holder attached with WithMetadata, "" if nothing
	// or if the name is not held.
	Metadata string
	// Readers is the number of live read holds ([Locker.RLock]); always 0
	// on a Redlock, which offers none.
	Readers int
}

// Inspect reports who holds the lock name, its remaining lease on the
// server, the last fencing token issued for it, the holder's metadata and the
// number of read holds, in one round trip of a read-only script. It uses the Locker's key prefix
// ([WithKeyPrefix]). It returns an error for an empty name, a nil Locker,
// after Close (ErrClosed), when Redis does not answer within the node timeout
// or ctx ends first (then matching ctx.Err()), and when the keys hold what
// this library does not write (the server's WRONGTYPE, a fence counter that
// is not a number), each inside a [NodeError]. It is safe for concurrent
// use.
//
// What it reports may be out of date as soon as it returns; use it to look,
// not to decide whether to take the lock (TryLock does that atomically).
func (lk *Locker) Inspect(ctx context.Context, name string) (Holder, error) {
	return inspect(ctx, lk.core(), name)
}

// Inspect asks every master about the lock name and reports the holder a
// quorum of them agrees on, as [Locker.Inspect] does for one node. Held is
// true only when a quorum holds the key with one owner value; Owner,
// Metadata and TTL describe that holder (TTL: until fewer than a quorum of
// masters would still hold the key, by their PTTLs). Token is the largest
// counter among the masters that answered, which is the last token issued,
// since every issued token reached a majority before the lock was handed
// out. It returns as soon as a quorum has answered and the answer can no
// longer change, so a hung minority does not slow it down; with fewer than a
// quorum answering within the node timeout, or when the masters that did
// not answer could give an owner some masters reported a quorum, it returns
// an error joining one [NodeError] per master that failed.
func (r *Redlock) Inspect(ctx context.Context, name string) (Holder, error) {
	return inspect(ctx, r.core(), name)
}

// inspect is Inspect on any number of nodes.
func inspect(ctx context.Context, c *engine.Core, name string) (Holder, error) {
	if c == nil {
		return Holder{}, engine.ErrNoCore
	}
	if name == "" {
		return Holder{}, errors.New("redlock: empty lock name")
	}
	h, _, err := inspectKey(ctx, c, "inspect", name, engine.LockKey(c.Cfg.Prefix, name), c.Cfg.Timeout(c.Cfg.TTL))
	return h, err
}

// inspectKey runs inspect.lua for the lock key key on every node and judges
// the replies by quorum (judge): the holder, and the replies it was judged
// from. op and name head the error of a round that reached too few nodes.
func inspectKey(ctx context.Context, c *engine.Core, op, name, key string, timeout time.Duration) (Holder, []engine.Reply, error) {
	if err := ctx.Err(); err != nil {
		return Holder{}, nil, err
	}
	if c.Life.IsClosing() {
		return Holder{}, nil, ErrClosed
	}
	keys := []string{key, key + scripts.FenceSuffix, key + scripts.MetaSuffix, key + scripts.ReadersSuffix}
	// Detached, as every call of the core: gather stops waiting when ctx
	// ends, and the read left behind is bounded by the node timeout.
	rs, interrupted, err := c.Pool.Round(engine.Detached(ctx), c.Pool.Nodes, timeout, timeout, func(ctx context.Context, n *node.Node, cl node.Client) engine.Reply {
		if err := c.Pool.Ids.Identify(ctx, n); err != nil {
			return engine.Reply{Err: err}
		}
		return inspectOn(ctx, cl, keys)
	}, time.Now().Add(timeout), ctx.Done(), func(rs []engine.Reply) bool {
		_, decided := judge(c.Pool, rs)
		return decided
	})
	if err != nil {
		return Holder{}, nil, err
	}
	h, decided := judge(c.Pool, rs)
	if decided && !interrupted {
		return h, rs, nil
	}
	return Holder{}, rs, c.Pool.ShortOf(op, name, c.Pool.Count(rs), "", engine.CtxErrIf(ctx, interrupted))
}

// inspectOn runs inspect.lua on one node.
func inspectOn(ctx context.Context, cl Client, keys []string) engine.Reply {
	res, err := scripts.Inspect.Run(ctx, cl, keys).Slice()
	if err != nil {
		return engine.Reply{Err: err}
	}
	if len(res) != 6 {
		return engine.Reply{Err: fmt.Errorf("%w: %v", node.ErrBadReply, res)}
	}
	owner, ok1 := res[0].(string)
	pttl, ok2 := res[1].(int64)
	counter, ok3 := res[2].(string)
	meta, ok4 := res[3].(string)
	readers, ok5 := res[4].(int64)
	rpttl, ok6 := res[5].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 {
		return engine.Reply{Err: fmt.Errorf("%w: %v", node.ErrBadReply, res)}
	}
	h := &engine.NodeHolder{Owner: owner, PTTL: pttl, Metadata: meta, Readers: int(readers), RPTTL: rpttl}
	if counter != "" {
		if h.Token, err = strconv.ParseInt(counter, 10, 64); err != nil {
			return engine.Reply{Err: fmt.Errorf("fence key %s does not hold a token: %q", keys[1], counter)}
		}
	}
	return engine.Reply{OK: true, Inspected: h}
}

// judge reads a round of inspect replies: the holder a quorum agrees on, and
// whether the round is decided: a quorum answered and no owner can still
// reach (or lose) a quorum. A node whose call failed counts as one that may
// hold the key, as one that has not replied yet does: with masters A and B
// answering "b" and "free" and C silent, b may well hold a quorum (a
// Redlock grant on A and C), so "not held" would be a guess. Undecided at
// the end of the round means fewer than a quorum answered, or the nodes
// that did not could tip it.
func judge(p *engine.Pool, rs []engine.Reply) (Holder, bool) {
	var (
		answered []*engine.NodeHolder
		votes    = make(map[string]int)
		failed   int
	)
	for _, r := range rs {
		if p.Nodes[r.Node].IsDup() {
			continue
		}
		if r.Err != nil || r.Inspected == nil {
			failed++
			continue
		}
		answered = append(answered, r.Inspected)
		if r.Inspected.Owner != "" {
			votes[r.Inspected.Owner]++
		}
	}
	if len(answered) < p.Quorum {
		return Holder{}, false
	}
	var h Holder
	for _, a := range answered {
		h.Token = max(h.Token, a.Token)
	}
	unknown := len(p.Nodes) - len(rs) + failed // not replied yet, or failed
	for owner, v := range votes {
		if v >= p.Quorum {
			h.Held, h.Owner = true, owner
		} else if v+unknown >= p.Quorum {
			return Holder{}, false // an owner that may hold a quorum, or still reach one
		}
	}
	if !h.Held {
		if len(p.Nodes) == 1 && answered[0].Readers > 0 {
			// Read holds live only on a Locker (RLock): one node.
			a := answered[0]
			h.Held, h.Readers, h.TTL = true, a.Readers, time.Duration(a.RPTTL)*time.Millisecond
		}
		return h, true
	}
	h.TTL, h.Metadata = quorumLease(answered, h.Owner, p.Quorum)
	return h, true
}

// quorumLease is how long owner keeps a quorum of the answers: until the
// quorum-th longest lease among the nodes that hold it runs out (-1, no
// expiry, outlasts every lease), and its metadata.
func quorumLease(answered []*engine.NodeHolder, owner string, quorum int) (ttl time.Duration, metadata string) {
	var pttls []int64
	for _, a := range answered {
		if a.Owner == owner {
			pttls = append(pttls, a.PTTL)
			if metadata == "" {
				metadata = a.Metadata
			}
		}
	}
	lease := func(ms int64) int64 {
		if ms < 0 {
			return math.MaxInt64
		}
		return ms
	}
	slices.SortFunc(pttls, func(a, b int64) int { return cmp.Compare(lease(b), lease(a)) })
	if ms := pttls[quorum-1]; ms >= 0 {
		return time.Duration(ms) * time.Millisecond, metadata
	}
	return -1, metadata
}
