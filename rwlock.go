package redlock

import (
	"context"

	"github.com/redlockgo/redlock/internal/engine"
)

// Read-write locks.
//
// A name's writer is its ordinary lock: Lock, TryLock and Do take it, and
// acquire.lua refuses it while read holds are live. A read hold is an entry
// of the sorted set "{<prefix><name>}:readers", scored by the end of its own
// lease in server time, so that a crashed reader's hold ends at its own TTL
// whatever the other readers do; rlock.lua refuses it while a writer holds
// the name or waits for it. A waiting Lock call enters itself in the queue
// of waiting writers "{<prefix><name>}:queue" at its refused attempts
// (enqueue, in _lib.lua), and leaves it when it gets the lock or gives up:
// that is the writer preference, which keeps a steady stream of readers
// from starving writers.

// RLock takes a shared read hold on name: many read holds at once, but
// never together with a writer (Lock, TryLock or Do on the same name, with
// the same key prefix). It waits while a writer holds the name or waits for
// it (writer preference), until ctx ends, like Lock: woken by the writer's
// release message or by the lease of what blocks it running out. Each read
// hold is a *Lock of its own: its own owner value and TTL, renewed by the
// watchdog, Done and Err when it is lost, released by Unlock. Its Token is 0
// (read holds mint no fencing token; see [Lock.Token]), and it ignores
// WithMetadata. Read holds of this Locker never queue behind its waiting
// writers, nor writers behind its waiting readers, so a reader and a writer
// of one process cannot deadlock each other in the local queue. A goroutine
// that holds a read hold and asks for the write lock on the same name waits
// for itself, as with any read-write lock. Errors are those of Lock.
func (lk *Locker) RLock(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	return handle(lk.rlock(ctx, name, opts, true))
}

// TryRLock makes one attempt to take a read hold on name, as RLock does.
// When a writer holds the name or waits for it, the error matches
// ErrNotObtained (a [*TakenError] whose Owner is the writer's owner value,
// or "" for a writer that waits).
func (lk *Locker) TryRLock(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	return handle(lk.rlock(ctx, name, opts, false))
}

// DoRead is [Locker.Do] for a read hold: it takes one as RLock does, runs
// fn while holding it (renewed unless WithAutoRenew(false)), cancels fn's
// context the moment the hold is lost, and always releases it. Its error
// is fn's, joined with one matching ErrLost if the hold was lost while fn
// ran.
func (lk *Locker) DoRead(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	return do(ctx, lk.core(), fn, func() (*engine.Hold, error) { return lk.rlock(ctx, name, opts, true) })
}

func (lk *Locker) rlock(ctx context.Context, name string, opts []Option, wait bool) (*engine.Hold, error) {
	c := lk.core()
	a, err := engine.Named(c, name, opts)
	if err != nil {
		return nil, err
	}
	a.Kind, a.Queue = engine.KindRead, engine.QueueKey(a.Channel, engine.QueueReaders)
	return c.Obtain(ctx, &a, wait)
}
