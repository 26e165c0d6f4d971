package redlock

import (
	"context"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/node"
)

// Redlock hands out locks over N independent Redis masters with the Redlock
// algorithm: an acquisition must be granted by a quorum of N/2+1 masters
// within the lock's validity. It is safe for concurrent use by multiple
// goroutines.
//
// Each acquisition is sent to all masters at once, each call bounded by the
// node timeout, and returns as soon as a quorum granted: a paused master
// does not slow acquisitions down while the others answer. Validity is
// measured from before the first send (TTL minus elapsed time minus drift),
// and checked as the last step. A failed attempt is released on every master
// that may have granted it, and a grant that arrives after its attempt was
// given up is released by the call that received it. A master that does not
// answer gets no more than a few probes while the others make a quorum, so
// that its calls do not tie up its client's connections, and it is used
// again as soon as it answers one.
//
// Lease repair: a renewal that a quorum extended puts the lock back on the
// masters where its key is gone (restarted empty, or never granted there)
// if the name is free on them, for what is left of the lease; never over
// another owner's key, and never for a lost lock (SAFETY.md says what this
// covers). An auto-renewed lock thus survives an empty restart of one master
// after another, one per renewal interval, not only the first.
//
// Fencing tokens: every master mints max(counter+1, floor), where the floor
// is this client's clock in µs, the same for all masters of one attempt, so
// that they normally mint the same token. The lock's token is the largest
// minted by the granting quorum; when the masters disagree (a counter was
// already past the floor) it is first written back (raise-only) to the other
// masters until a majority holds a counter at least that large, before the
// final validity check. Any later quorum intersects that majority, so tokens
// strictly increase while the masters of that majority keep their counters.
// When one of them loses its counter (restart without persistence), the time
// floor still keeps the next token larger, provided the last token did not
// run ahead of the acquiring client's clock: a counter pushed far ahead (a
// client with a fast clock, a manual INCRBY) plus a lost counter can let a
// token go backwards. Run masters with AOF (appendfsync always), or restart a
// crashed master only after the longest TTL in use, as the Redlock spec
// advises, and keep clocks synchronised (NTP).
//
// Primitives: a Redlock offers the exclusive lock (Lock, TryLock, Do), leader
// elections on it (Election), Inspect, Release and Ping, whose guarantees
// carry over a quorum. It offers no
// read-write lock, semaphore or multi-name lock: a read hold or a permit
// lives in a set that each master prunes by its own clock, and a quorum of
// such sets does not bound the holders the way a quorum of keys bounds the
// one owner. Use a [Locker] for those.
type Redlock struct{ c *engine.Core }

// NewRedlock returns a Redlock over clients, one per independent master, with
// opts as defaults for every call. The quorum is len(clients)/2+1. An even
// number of masters is allowed but buys no extra fault tolerance over one
// fewer. It returns an error for an empty list, a nil client, the same client
// (or two clients with the same address) twice, two clients that reach the
// same server under different addresses (127.0.0.1:P and localhost:P, a DNS
// alias: found by the servers' INFO run_id), a replica listed next to its
// master (it holds the master's keys and would vote twice for them: found
// by INFO replication's replication ID), or an invalid option. It
// starts three goroutines (the watchdog, the loss clock and its
// bookkeeping), pub/sub ones once a Lock waits, and, on a go-redis Sentinel
// client, one that keeps it on the current master while locks are in use;
// call Close to stop them.
//
// NewRedlock warms every master up concurrently (dial, scripts, identity), at
// most 1s or the node timeout. A master that does not answer in time is
// identified on its first contact, before its first vote counts; if it then
// turns out to duplicate another, its votes never count (the Redlock works
// on with the remaining masters and the same quorum). Each master whose
// maxmemory-policy is anything but noeviction gets one warning through
// [WithLogger]'s logger, as for [NewLocker].
func NewRedlock(clients []Client, opts ...Option) (*Redlock, error) {
	nodes := make([]node.Client, len(clients))
	for i, cl := range clients {
		nodes[i] = cl
	}
	c, err := engine.NewCore(nodes, opts)
	if err != nil {
		return nil, err
	}
	node.WarnEviction(c.Pool.Nodes, c.Cfg.Logger)
	node.WarnSentinel(c.Pool.Nodes, c.Cfg.Logger)
	return &Redlock{c: c}, nil
}

// Lock acquires the lock name on a quorum of masters, retrying after a
// jittered delay until it is granted or ctx ends. Errors are as for
// [Locker.Lock]; a failed attempt's error joins one [NodeError] per master
// that did not grant.
func (r *Redlock) Lock(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	return handle(engine.LockName(ctx, r.core(), name, opts))
}

// TryLock makes one attempt to acquire the lock name on a quorum of masters.
// The error matches ErrNotObtained and joins one [NodeError] per master that
// did not grant.
func (r *Redlock) TryLock(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	return handle(engine.TryLockName(ctx, r.core(), name, opts))
}

// Do runs fn while holding the lock name, as [Locker.Do] does.
func (r *Redlock) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	c := r.core()
	return do(ctx, c, fn, func() (*engine.Hold, error) { return engine.LockName(ctx, c, name, opts) })
}

// Close stops background work and releases held locks, as [Locker.Close]
// does. It does not close the clients.
func (r *Redlock) Close() error { return r.core().Close() }

// Ping checks, before any lock is needed, that a quorum of the masters
// answer and accept writes; the error names every master that does not,
// with its cause. Bounded by the node timeout (and ctx).
func (r *Redlock) Ping(ctx context.Context) error { return engine.Ping(ctx, r.core()) }

// core is the engine, or nil for a nil or zero Redlock, whose methods then
// return an error instead of panicking.
func (r *Redlock) core() *engine.Core {
	if r == nil {
		return nil
	}
	return r.c
}
