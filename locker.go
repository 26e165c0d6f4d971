package redlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/node"
)

// Locker hands out locks on one Redis deployment: a standalone server, a
// Sentinel-managed master (failover client) or a Cluster. It is safe for
// concurrent use by multiple goroutines; share one per process and client.
//
// A Locker's locks are exactly as safe as that deployment: replication is
// asynchronous, so a failover can lose a lock together with its fencing
// counter. Tokens carry a time floor (this client's clock, in µs) so that
// fencing still tells the two holders apart; see the package documentation.
type Locker struct{ c *engine.Core }

// NewLocker returns a Locker on client with opts as defaults for every call.
// It starts three goroutines (the watchdog, the loss clock and its
// bookkeeping), pub/sub ones once a Lock waits, and, on a go-redis Sentinel
// client, one that keeps it on the current master while locks are in use;
// call Close to stop them. It returns an error for a nil client or an invalid option.
//
// NewLocker warms the client up before it returns (a dial and the scripts
// loaded into the server's cache, at most 1s or the node timeout, ignoring
// failures), so that a first call with a short TTL is not judged by a budget
// that a dial spent. When the server's maxmemory-policy is anything but
// noeviction, it logs a warning through [WithLogger]'s logger: such a server
// may evict lock keys (see the README). A server that refuses CONFIG GET, or
// does not answer in time, is not reported.
//
// Every call to Redis is bounded by the node timeout ([WithNodeTimeout]),
// and a call with a ctx that nothing cancels runs inline in the caller's
// goroutine. With ContextTimeoutEnabled (any client kind) the ctx deadline
// bounds it. On a plain *redis.Client without it (go-redis's defaults: 3s
// read timeout) the Locker's scripts and pipelines still go through the
// client, and so through all its hooks, and a hook the Locker adds to the
// client (it changes nothing else) hands them to a clone of the client
// whose socket timeouts are the node timeout (redis.Client.WithTimeout: the same
// connection pool). Other clients (Ring, ClusterClient without
// ContextTimeoutEnabled) run each call in a goroutine that the Locker stops
// waiting for at the deadline. Either way the client's hooks see every
// command.
func NewLocker(client Client, opts ...Option) (*Locker, error) {
	if node.IsNil(client) {
		return nil, errors.New("redlock: nil client")
	}
	c, err := engine.NewCore([]node.Client{client}, opts)
	if err != nil {
		return nil, err
	}
	node.WarnEviction(c.Pool.Nodes, c.Cfg.Logger)
	node.WarnSentinel(c.Pool.Nodes, c.Cfg.Logger)
	return &Locker{c: c}, nil
}

// Lock acquires the lock name, waiting while another owner holds it until
// the lock is free or ctx ends. A waiter wakes on the holder's release
// message (one per release per Locker, in FIFO order; see the README), or
// when the holder's lease runs out. Options override the Locker's defaults for
// this call. When ctx ends first, the error matches both ErrNotObtained and
// ctx.Err(), and no key of this call is left behind: keys it set are
// released before it returns (on a server that stalls right after granting,
// that takes up to the node timeout past ctx's end), and a grant still on
// its way when ctx ended is released by the call that receives it. Other
// errors: an empty name or invalid option, ErrClosed after Close, and an
// error matching ErrNotObtained when Redis refuses in a way retrying cannot
// fix.
func (lk *Locker) Lock(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	return handle(engine.LockName(ctx, lk.core(), name, opts))
}

// TryLock makes one attempt to acquire the lock name. When another owner
// holds it, or Redis did not answer within the node timeout, the error
// matches ErrNotObtained.
func (lk *Locker) TryLock(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	return handle(engine.TryLockName(ctx, lk.core(), name, opts))
}

// Do acquires the lock name as Lock does, runs fn while holding it (renewed
// by the watchdog unless WithAutoRenew(false)), and always releases it, even
// when fn panics (release first, then the panic goes on). fn's context is
// cancelled the moment the lock stops being held for any reason other than
// Do's own release: lost (the cause is the [*LostError] that [Lock.Err]
// reports, matching ErrLost and its [LossReason]), Close (the same, with
// reason [LossClosed], matching ErrClosed too), or an Unlock of the lock
// through [FromContext]. It carries the
// lock: [FromContext] returns it, for its fencing token. Do returns fn's
// error, joined with an error matching ErrLost if the lock was lost while fn
// ran (also when Close released it under fn, then matching ErrClosed too, or
// when the release found the key no longer ours), even when fn returned nil.
func (lk *Locker) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	c := lk.core()
	return do(ctx, c, fn, func() (*engine.Hold, error) { return engine.LockName(ctx, c, name, opts) })
}

// Close marks every held lock released (their Done channels close, the
// contexts of running Do calls are cancelled, and Err, like those contexts'
// cause, is a [*LostError] with reason [LossClosed], matching ErrLost,
// ErrReleased and ErrClosed), releases them on the server in one
// pipelined round, stops the watchdog and pub/sub, and waits for the
// Locker's goroutines; all of it within one node timeout. A release the
// server did not answer in time (paused, or behind a silent link) is sent
// again after Close returns, until the server runs it or the lease it
// releases would have ended (at most one TTL; it stops at once on a server
// that refuses connections, or when the client is closed). A call still
// stuck on an unresponsive
// server after that (only possible when the client does not apply ctx
// deadlines itself, see ContextTimeoutEnabled) ends by the client's own read
// timeout. An acquisition whose grant arrives after Close
// started releases it and fails with ErrClosed; acquire calls after Close
// fail with ErrClosed. It does not close the client. Close is idempotent and
// returns nil; a concurrent second Close returns when the first does.
func (lk *Locker) Close() error { return lk.core().Close() }

// Ping checks, before any lock is needed, that the Redis deployment answers
// and accepts writes: a wrong address, a replica, a wrong password or a
// server that is not Redis fail here with the cause, instead of in the
// first Lock. Bounded by the node timeout (and ctx).
func (lk *Locker) Ping(ctx context.Context) error { return engine.Ping(ctx, lk.core()) }

// core is the engine, or nil for a nil or zero Locker, whose methods then
// return an error instead of panicking.
func (lk *Locker) core() *engine.Core {
	if lk == nil {
		return nil
	}
	return lk.c
}

// do is Do for a lock that take acquires on c: hold it while fn runs.
func do(ctx context.Context, c *engine.Core, fn func(context.Context) error, take func() (*engine.Hold, error)) (err error) {
	if c == nil {
		return engine.ErrNoCore
	}
	if fn == nil {
		return errors.New("redlock: nil function")
	}
	l, err := take()
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(context.WithValue(ctx, lockKeyCtx{}, lockOf(l)))
	defer cancel(nil)
	// fn's ctx ends the moment the lock stops being held for any reason
	// other than Do's own Unlock below: lost, Close, an Unlock through
	// FromContext.
	l.OnEnd(func(cause error) { cancel(cause) })
	defer func() {
		p := recover()
		uerr := l.Unlock(context.WithoutCancel(ctx))
		if p != nil {
			panic(p) // released first, then the panic goes on
		}
		switch lerr := l.Err(); {
		case errors.Is(lerr, ErrLost):
			// Lost, or Close released it while fn still ran (a LostError
			// with reason closed, which also matches ErrClosed).
			err = withLoss(fctx, err, lerr)
		case errors.Is(uerr, errAlreadyReleased):
			// fn released the lock itself, through FromContext.
		case errors.Is(uerr, ErrNotHeld):
			// The nodes no longer had our key: lost while fn ran.
			err = join(err, &opError{msg: fmt.Sprintf("redlock: lock %q lost while the function ran", l.Name), sentinel: ErrLost}, uerr)
		case uerr != nil:
			err = join(err, uerr)
		}
	}()
	return fn(fctx)
}

// withLoss is Do's error for a lock lost while fn ran: the loss, after fn's
// own error, or alone when fn only returned the cancellation that the loss
// caused (still matched by errors.Is, not printed twice).
func withLoss(fctx context.Context, err, lerr error) error {
	switch {
	case err == nil:
		return lerr
	case err == context.Canceled && context.Cause(fctx) == lerr: // fn returned fctx.Err()
		return join(lerr, quietError{err})
	}
	return join(err, lerr)
}

type lockKeyCtx struct{}

// FromContext returns the lock that Do holds while running its function,
// from the context Do passes it, so the function can send the lock's fencing
// token with its writes. It reports false for any other context.
func FromContext(ctx context.Context) (*Lock, bool) {
	l, ok := ctx.Value(lockKeyCtx{}).(*Lock)
	return l, ok
}
