package redlock

import (
	"context"
	"errors"
)

// Locker hands out locks on one Redis deployment: a standalone server, a
// Sentinel-managed master (failover client) or a Cluster. It is safe for
// concurrent use by multiple goroutines; share one per process and client.
//
// A Locker's locks are exactly as safe as that deployment: replication is
// asynchronous, so a failover can lose a lock together with its fencing
// counter. Tokens carry a server-time floor so that fencing still tells the
// two holders apart; see the package documentation.
type Locker struct{ c *core }

// NewLocker returns a Locker on client with opts as defaults for every call.
// It starts one watchdog goroutine; call Close to stop it. It returns an error
// for a nil client or an invalid option.
//
// Every call to Redis is bounded by the node timeout ([WithNodeTimeout]).
// go-redis applies ctx deadlines to its sockets only with
// ContextTimeoutEnabled; without it, each call runs in a goroutine that the
// Locker stops waiting for at the deadline. With it set on the client, calls
// run inline in the caller's goroutine, which saves two goroutine switches
// per call.
func NewLocker(client Client, opts ...Option) (*Locker, error) {
	if isNil(client) {
		return nil, errors.New("redlock: nil client")
	}
	c, err := newCore([]Client{client}, opts)
	if err != nil {
		return nil, err
	}
	return &Locker{c: c}, nil
}

// Lock acquires the lock name, waiting while another owner holds it until
// the lock is free or ctx ends. A waiter wakes on the holder's release
// message (one per release per Locker, in FIFO order; see the README), or
// when the holder's lease runs out. Options override the Locker's defaults for
// this call. When ctx ends first, the error matches both ErrNotObtained and
// ctx.Err(), and no key of this call is left behind: keys it set are
// released before it returns, and a grant still on its way when ctx ended is
// released by the call that receives it. Other errors: an empty
// name or invalid option, ErrClosed after Close, and an error matching
// ErrNotObtained when Redis refuses in a way retrying cannot fix.
func (lk *Locker) Lock(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	return lk.c.lock(ctx, name, opts, true)
}

// TryLock makes one attempt to acquire the lock name. When another owner
// holds it, or Redis did not answer within the node timeout, the error
// matches ErrNotObtained.
func (lk *Locker) TryLock(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	return lk.c.lock(ctx, name, opts, false)
}

// Do acquires the lock name as Lock does, runs fn while holding it (renewed
// by the watchdog unless WithAutoRenew(false)), and always releases it, even
// when fn panics (release first, then the panic goes on). fn's context is
// cancelled the moment the lock is lost, and carries the lock: [FromContext]
// returns it, for its fencing token. Do returns fn's error, joined with an
// error matching ErrLost if the lock was lost while fn ran, even when fn
// returned nil.
func (lk *Locker) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	return lk.c.do(ctx, name, fn, opts)
}

// Close stops the watchdog, releases the locks still held (one pipelined
// round, bounded by the node timeout; their Done channels close and Err
// returns ErrReleased) and waits for every goroutine the Locker started,
// including calls left waiting on an unresponsive server, which end at the
// client's read timeout. Acquire calls after Close fail with ErrClosed. It
// does not close the client. Close is idempotent and returns nil.
func (lk *Locker) Close() error { return lk.c.close() }
