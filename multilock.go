package redlock

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/redlockgo/redlock/internal/engine"
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
// Ring client for names that are not all one (they may lie on several
// shards, and one WAIT covers one). Errors are those of Lock, and an error
// for an empty list or an empty name.
func (lk *Locker) LockAll(ctx context.Context, names []string, opts ...Option) (*Lock, error) {
	return handle(lk.lockAll(ctx, names, opts, true))
}

// TryLockAll makes one attempt to acquire all names at once, as LockAll
// does. When a name is held, the error matches ErrNotObtained, and its
// [*TakenError] names that name and its holder.
func (lk *Locker) TryLockAll(ctx context.Context, names []string, opts ...Option) (*Lock, error) {
	return handle(lk.lockAll(ctx, names, opts, false))
}

func (lk *Locker) lockAll(ctx context.Context, names []string, opts []Option, wait bool) (*engine.Hold, error) {
	c := lk.core()
	if c == nil {
		return nil, engine.ErrNoCore
	}
	if len(names) == 0 {
		return nil, errors.New("redlock: LockAll: no names")
	}
	if slices.Contains(names, "") {
		return nil, errors.New("redlock: LockAll: empty lock name")
	}
	cfg, err := engine.CallOptions(&c.Cfg, opts)
	if err != nil {
		return nil, err
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	sharded := engine.KeyRouted(c.Pool.Nodes[0].Client)
	if sharded && cfg.Replicas > 0 && len(sorted) > 1 {
		return nil, errors.New("redlock: LockAll: WithReplicaAcks is not supported across the shards of a Cluster or Ring client")
	}
	mk := engine.NewMultiKeys(cfg.Prefix, sorted, sharded)
	joined := strings.Join(sorted, ",")
	first := engine.ReleaseChannel(mk.Locks[0])
	a := engine.Acquisition{Kind: engine.KindMulti, Name: joined, Channel: first, Cfg: cfg, Multi: mk, Queue: engine.QueueKey(first, engine.QueueMulti), Held: mk.Locks[0]}
	return c.Obtain(ctx, &a, wait)
}
