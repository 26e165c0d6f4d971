package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// TakenError reports that another owner holds the lock: the error of a
// TryLock refused for that reason, and of a Lock that gave up (its retry
// policy ran out, or its context ended) after such a refusal, carries one;
// get it with errors.As. It matches ErrNotObtained. On a Redlock it
// describes the masters that refused.
type TakenError struct {
	// Name is the lock's name.
	Name string
	// Owner is the value the holder stored under the key (on the first
	// refusing master): its Lock.Owner, if it is a lock of this library;
	// "queued:<id>" while a release has reserved the name for a queued
	// waiter of another Lock call; "" when read holds refuse a writer, or a
	// waiting writer refuses a read hold ([Locker.RLock]).
	Owner string
	// TTL is the holder's remaining lease, the shortest among the refusing
	// masters, or negative when the key has no expiry.
	TTL time.Duration
	// Nodes are the indices of the refusing masters (0 for a Locker) among
	// those that answered before the attempt was settled: a Redlock stops
	// listening once a majority refused.
	Nodes []int
}

func (e *TakenError) Error() string {
	if e.Owner == "" {
		return fmt.Sprintf("redlock: lock %q busy (read holds, or a writer waiting) for another %v", e.Name, e.TTL)
	}
	return fmt.Sprintf("redlock: lock %q held by owner %s for another %v", e.Name, e.Owner, e.TTL)
}

// Is reports whether target is ErrNotObtained.
func (e *TakenError) Is(target error) bool { return target == ErrNotObtained }

// Key returns the Redis key that holds the lock ("{<prefix><name>}"; for a
// read hold or a permit, the sorted set that holds it; for a LockAll lock,
// its first name's key), for tools and tests that inspect or break it (see
// package redlocktest).
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.keys[0]
}

// TTL asks the server for the lock's remaining lease, as bsm/redislock's
// Lock.TTL does: the key's PTTL while it still holds this lock's owner
// value. On a Redlock it is the lease that a quorum of masters still grants
// (the quorum-th longest). It returns an error matching ErrNotHeld when the
// key is gone or another owner's (on too many masters), and another error
// when too few nodes answered within the node timeout. It does not look at
// the local state: use [Lock.Err] or [Lock.Until] for that, which cost no
// round trip and are the safer bound (they subtract drift).
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil {
		return 0, errNilLock
	}
	return l.eng.remaining(ctx, l)
}

// Valid reports whether the lock is still held: locally (Err is nil) and on
// the server (a quorum of nodes still hold its owner value), as redsync's
// Valid does, but never true after Until. An error means the server could
// not be asked; false with a nil error means it is not held.
func (l *Lock) Valid(ctx context.Context) (bool, error) {
	if l.Err() != nil {
		return false, nil
	}
	d, err := l.TTL(ctx)
	switch {
	case errors.Is(err, ErrNotHeld):
		return false, nil
	case err != nil:
		return false, err
	}
	return d != 0 && l.Err() == nil, nil
}

// remaining is Lock.TTL (engine).
func (c *core) remaining(ctx context.Context, l *Lock) (time.Duration, error) {
	ch, err := c.fanOut(ctx, c.nodes, l.timeout, l.timeout, func(ctx context.Context, n *node) reply {
		v, err := l.runParts(ctx, n.client, func(p int) (*redis.Script, []string, []any) {
			s, keys := l.pttlCmd(p)
			return s, keys, []any{l.owner}
		}, foldPTTL)
		return reply{ok: err == nil && v != replyNotOurs, val: v, err: err}
	})
	if err != nil {
		return 0, err
	}
	rs, interrupted := gather(ch, c.nodes, time.Now().Add(l.timeout), ctx.Done(), never)
	t := c.count(rs)
	if t.ok >= c.quorum {
		var ttls []time.Duration
		for _, r := range rs {
			if r.err == nil && r.ok && !c.nodes[r.node].isDup() {
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
		return ttls[c.quorum-1], nil
	}
	if c.impossible(t.no) {
		return 0, fmt.Errorf("%w: the key is gone or another owner's on %d of %d nodes", ErrNotHeld, t.no, len(c.nodes))
	}
	return 0, c.shortOf("TTL", t, "", ctxErrIf(ctx, interrupted))
}

// appendTaken adds to errs a TakenError for the nodes in rs that refused
// l because another owner held the key; hint is the shortest lease among
// them. For a multi-name lock it names the name that was held.
func appendTaken(errs []error, l *Lock, rs []reply, hint time.Duration) []error {
	var te *TakenError
	for _, r := range rs {
		if r.err != nil || r.ok {
			continue
		}
		if te == nil {
			name := l.name
			if l.multi != nil && r.code >= 0 && int(r.code) < len(l.multi.names) {
				name = l.multi.names[r.code]
			}
			te = &TakenError{Name: name, Owner: r.holder, TTL: hint}
		}
		te.Nodes = append(te.Nodes, r.node)
	}
	if te == nil {
		return errs
	}
	return append(errs, te)
}

// acquireReply reads acquire.lua's reply: status and value, plus the
// holder's owner value on refusal; res[2] is the 1-based index of the name
// that refused a multi_acquire.lua call, 0 for the other scripts.
func acquireReply(cmd *redis.Cmd) (res [3]int64, holder string, err error) {
	vals, err := cmd.Slice()
	if err != nil {
		return res, "", err
	}
	if len(vals) < 2 || len(vals) > 4 {
		return res, "", fmt.Errorf("%w: %v", errBadReply, vals)
	}
	for i := range 2 {
		v, ok := vals[i].(int64)
		if !ok {
			return res, "", fmt.Errorf("%w: %v", errBadReply, vals)
		}
		res[i] = v
	}
	if len(vals) >= 3 {
		holder, _ = vals[2].(string)
	}
	if len(vals) == 4 {
		// multi_acquire.lua: which of the names refused.
		i, ok := vals[3].(int64)
		if !ok {
			return res, "", fmt.Errorf("%w: %v", errBadReply, vals)
		}
		res[2] = i
	}
	return res, holder, nil
}
