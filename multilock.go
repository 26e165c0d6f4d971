package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// LockAll acquires the locks of all names at once, all or nothing, waiting
// until every one is free or ctx ends, and returns one *Lock for all of
// them: its Unlock, Extend, Done, Err and renewals cover every name, and it
// is lost as soon as any name is. Each name is exactly the lock that Lock
// takes on it (same keys, same exclusion, read holds refuse it too), so
// LockAll and Lock on overlapping names exclude each other. Duplicate names
// count once.
//
// Names are taken in one global order (sorted), so two callers asking for
// the same names in different orders never deadlock. On a single server or
// a Sentinel master they are taken in one script; on a Cluster or Ring
// client, whose names may live on different shards, one name at a time in
// that order, and a refusal releases the names already taken before the
// attempt fails. The lock's Token is one fencing token valid for every name:
// each name's counter is raised to it, so it is larger than any token issued
// before for any of the names. Name returns the names joined by commas, and
// [Lock.Names] the list.
//
// While it waits, it sleeps on the release messages of the name that
// refused it last. A waiting LockAll does not keep read holds out (no writer
// preference) and is never handed a name by an Unlock of this Locker.
// WithMetadata is ignored, and WithReplicaAcks is refused on a Cluster or
// Ring client. Errors are those of Lock, and an error for an empty list or
// an empty name.
func (lk *Locker) LockAll(ctx context.Context, names []string, opts ...Option) (*Lock, error) {
	return lk.core().lockAll(ctx, names, opts, true)
}

// TryLockAll makes one attempt to acquire all names at once, as LockAll
// does. When a name is held, the error matches ErrNotObtained, and its
// [*TakenError] names that name and its holder.
func (lk *Locker) TryLockAll(ctx context.Context, names []string, opts ...Option) (*Lock, error) {
	return lk.core().lockAll(ctx, names, opts, false)
}

// Names returns the names a lock holds: those of a [Locker.LockAll], in
// their global order, or the one name of any other lock.
func (l *Lock) Names() []string {
	switch {
	case l == nil:
		return nil
	case l.multi != nil:
		return slices.Clone(l.multi.names)
	}
	return []string{l.name}
}

func (c *core) lockAll(ctx context.Context, names []string, opts []Option, wait bool) (*Lock, error) {
	if c == nil {
		return nil, errNoCore
	}
	if len(names) == 0 {
		return nil, errors.New("redlock: LockAll: no names")
	}
	if slices.Contains(names, "") {
		return nil, errors.New("redlock: LockAll: empty lock name")
	}
	cfg, err := c.callConfig(opts)
	if err != nil {
		return nil, err
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	sharded := keyRouted(c.nodes[0].client)
	if sharded && cfg.replicas > 0 && len(sorted) > 1 {
		return nil, errors.New("redlock: LockAll: WithReplicaAcks is not supported across the shards of a Cluster or Ring client")
	}
	mk := newMultiKeys(cfg.prefix, sorted, sharded)
	joined := strings.Join(sorted, ",")
	first := releaseChannel(mk.locks[0])
	a := acquisition{kind: kindMulti, name: joined, channel: first, cfg: cfg, multi: mk, queue: queueKey(first, queueMulti), held: mk.locks[0]}
	return c.obtain(ctx, &a, wait)
}

// newMultiLock makes the lock of one attempt at the names of mk, joined in
// name; channel is the first name's.
func (c *core) newMultiLock(name, channel string, cfg *config, mk *multiKeys) *Lock {
	l := c.makeLock(name, channel, cfg)
	l.kind, l.metadata, l.multi, l.keys = kindMulti, "", mk, mk.locks
	return l
}

// newMultiKeys lays out the keys of a multi-name lock on names (sorted,
// distinct): one part for all of them, or one per name when sharded.
func newMultiKeys(prefix string, names []string, sharded bool) *multiKeys {
	mk := &multiKeys{names: names}
	for _, name := range names {
		mk.locks = append(mk.locks, lockKey(prefix, name))
	}
	part := func(names []string) {
		n := len(names)
		acq := make([]string, 3*n)
		rel := make([]string, 2*n)
		for i, name := range names {
			tag := lockKey(prefix, name)
			acq[i], acq[n+i], acq[2*n+i] = tag, tag+fenceSuffix, tag+readersSuffix
			rel[i], rel[n+i] = tag, tag+releasedSuffix
		}
		mk.acq = append(mk.acq, acq)
		mk.rel = append(mk.rel, rel)
		mk.ext = append(mk.ext, acq[:n])
	}
	if !sharded {
		part(names)
		return mk
	}
	for i := range names {
		part(names[i : i+1])
	}
	return mk
}

// multiAcquireOn takes a multi-name lock spread over shards, one part at a
// time in the names' global order. A part that refuses ends the attempt
// with the parts before it granted, and the outcome granted, so that the
// failed attempt releases them before it returns; an error ends it with
// the outcome failed (unknown), released the same way in the background.
// Each part mints its token from one time floor; when they differ, the
// counters below the largest are raised to it, so that one token is valid
// for every name.
func (c *core) multiAcquireOn(ctx context.Context, n *node, l *Lock, cfg *config) (reply, outcome) {
	fence, floor := "0", ""
	if cfg.fencing {
		fence, floor = "1", strconv.FormatInt(time.Now().UnixMicro(), 10)
	}
	tokens := make([]int64, 0, l.parts())
	for p := range l.parts() {
		res, holder, err := acquireReply(scriptMultiAcquire.Run(ctx, n.client, l.multi.acq[p], l.owner, ttlMillis(cfg.ttl), fence, floor))
		// A refusal at part p leaves the parts before it ours: granted, so
		// the failed attempt releases them.
		before := granted
		if p == 0 {
			before = taken
		}
		switch {
		case err != nil:
			return reply{err: err}, failed
		case res[0] == acqTaken:
			return reply{val: res[1], holder: holder, code: int64(p)}, before
		case res[0] != acqGranted:
			return reply{err: fmt.Errorf("%w (counter of %q)", errTokenSpace, l.multi.names[p])}, before
		}
		tokens = append(tokens, res[1])
	}
	token := slices.Max(tokens)
	for p, t := range tokens {
		if t == token {
			continue
		}
		fences := l.multi.acq[p][1:2] // one name per part
		if err := scriptRaise.Run(ctx, n.client, fences, strconv.FormatInt(token, 10)).Err(); err != nil {
			return reply{err: fmt.Errorf("redlock: raising the fence counter of %q to token %d: %w", l.multi.names[p], token, err)}, granted
		}
	}
	return reply{ok: true, val: token}, granted
}
