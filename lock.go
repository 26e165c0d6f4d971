package redlock

import (
	"context"
	"time"

	"github.com/redlockgo/redlock/internal/engine"
)

// Lock is a held lock: the handle one successful Lock, TryLock or Do returns.
// Its identity (name, owner value, fencing token) never changes; a new
// acquisition always returns a new Lock with a fresh owner value, so a stale
// handle can never release or extend a later holder's lock.
//
// A Lock is safe for concurrent use by multiple goroutines. Exactly one of
// several concurrent Unlock calls returns nil. The methods of a nil *Lock
// do not panic: it is not held.
type Lock struct {
	a engine.LockAlloc
}

// ref is the state of l, nil for a nil l (whose methods then report a lock
// that is not held).
func (l *Lock) ref() *engine.Hold {
	if l == nil {
		return nil
	}
	return &l.a.Hold
}

// lockOf is the handle of h, nil for a nil h.
func lockOf(h *engine.Hold) *Lock {
	if h == nil {
		return nil
	}
	l, _ := h.User.(*Lock)
	return l
}

// handle is what an acquire call returns to its user: the handle of h.
func handle(h *engine.Hold, err error) (*Lock, error) { return lockOf(h), err }

// Name returns the lock's name as given to the acquire call; for a
// [Locker.LockAll] lock, its names in order, joined by commas (see Names).
func (l *Lock) Name() string {
	if l == nil {
		return ""
	}
	return l.a.Name
}

// Owner returns the random owner value (a UUID) stored in Redis under the
// lock's key while it is held.
func (l *Lock) Owner() string {
	if l == nil {
		return ""
	}
	return l.a.Owner
}

// Metadata returns what [WithMetadata] attached to the lock, "" if nothing.
func (l *Lock) Metadata() string {
	if l == nil {
		return ""
	}
	return l.a.Metadata
}

// Token returns the lock's fencing token: strictly increasing across
// acquisitions of one name, and >= 1. Pass it to a [Fence] or [RedisFence]
// guarding the resource. It is 0 when fencing is off ([WithFencing]) and
// for a read hold ([Locker.RLock]), which shares the name and so cannot be
// told apart by a token; a [Semaphore]'s permits count on their own, and a
// [Locker.LockAll] lock has one token valid for each of its names.
func (l *Lock) Token() int64 {
	if l == nil {
		return 0
	}
	return l.a.Token
}

// Until returns the end of the lock's local validity: the instant read before
// the last successful acquire, extend or renewal was sent, plus its TTL,
// minus the drift allowance. A lock handed over by an Unlock that kept the
// lease in force (see [Lock.Unlock]) has the releasing lock's until it
// renews. No other owner can be granted the name before
// it. The value carries a monotonic clock reading; compare it with time.Now
// or time.Until, not after serialising it.
func (l *Lock) Until() time.Time {
	if l == nil {
		return time.Time{}
	}
	return l.a.LockedUntil()
}

// Done returns a channel closed once the lock is no longer held: after
// Unlock or Close, or when it is lost. Loss by time is signalled by one loss
// clock per Locker (a goroutine and a timer) that closes the Done of every
// lock whose renewals have not succeeded, whatever a hung request is doing,
// ahead of its Until by 1ms plus half the drift allowance (plus the time a
// batch of locks due together takes). So Done closes by Until unless that
// goroutine waits longer than the lead for a CPU (a heavily loaded
// machine); even then the rest of the drift allowance lies between Until
// and the earliest moment the server can grant the name to anyone else.
// [Lock.Err] is exact: it compares the clock with Until whenever it is
// called. A key deleted, overwritten, evicted or flushed by someone else
// closes Done within milliseconds when the Locker or Redlock has its
// tracking connection ([WithLossTracking]; open once a lock has been held
// for 50 ms), else at the next renewal.
func (l *Lock) Done() <-chan struct{} { return l.ref().Done() }

// Err returns nil while the lock is held, a [*LostError] once it was lost
// (matching ErrLost and its [LossReason]), and ErrReleased after Unlock.
// After Close it is a LostError with reason [LossClosed], which also matches
// ErrReleased and ErrClosed. It is exact by the clock: once Until (or the
// end of [WithMaxHold]) has passed without a renewal, it reports the loss
// even if the loss timer has not fired yet (and closes Done then). A nil
// *Lock reports ErrNotHeld.
func (l *Lock) Err() error { return l.ref().Err() }

// Unlock releases the lock on every node where it is still ours; another
// owner's key is never touched. It stops renewal and closes Done before
// sending anything (a renewal already on its way is not called back; it finds
// the key released). It returns nil once a quorum of nodes (the one node of a
// Locker) released it, without waiting for nodes that do not answer; a
// release that Redis carried out but whose reply was lost, and that go-redis
// retried, still returns nil. It returns an error matching ErrNotHeld when
// the lock was already released, was lost, or the nodes say it is no longer
// ours; any other error means the outcome is unknown on too many nodes: the
// release is then sent again in the background to each node that did not
// answer, until it runs there (a paused server, a silent link that heals) or
// for three leases (10s at least), so the name is free right after the fault
// rather than at the lease's end. Cancelling ctx does not stop the release:
// it runs detached from ctx, so a cancelled caller still unlocks, bounded by
// the node timeout; by two of them when a withdrawal of this Locker's waiter
// that gave up on the name is still on its way, which the release waits for
// first. When a goroutine of the same Locker waits for the name, Unlock hands
// the lock to the first of them in the same script that releases it, unless a
// waiter of another process queued for the name first: then, as whenever a
// waiter of another process is queued, the name is reserved for that waiter
// and only it is woken (a Locker only; a Redlock releases and lets its
// waiters acquire). The waiter gets a lease of its own TTL from the Unlock,
// or, when it renews ([WithAutoRenew]) a lease of this lock's TTL and drift
// allowance, takes over this lock's lease as it stands while that lease's
// renewal (at the waiter's interval from its send) is at least a node
// timeout away and no Extend of this lock is on its way or went
// unanswered: its Until is then this lock's, and its first renewal comes
// when that lease's is due.
func (l *Lock) Unlock(ctx context.Context) error { return l.ref().Unlock(ctx) }

// Extend sets the lock's lease to ttl from now on every node where it is
// still ours, and moves Until accordingly; later renewals use ttl too (and
// come no later than halfway through its validity). It never re-creates an
// expired key. It succeeds only when a quorum of nodes (the one node of a
// Locker) extended within the new validity. It returns an error matching
// ErrNotHeld when the lock is no longer held (the lock is then marked lost),
// an error for a ttl out of range, and another error when too many nodes
// failed to answer, in which case the lock stays held until its current
// Until, or, for a ttl that ends sooner, until the new lease's validity: a
// node that did not answer may run the Extend yet (a paused server runs what
// waits in its sockets when it resumes). The watchdog, if on, then renews
// at once, to the lease in force before.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error { return l.ref().Extend(ctx, ttl) }

// Key returns the Redis key that holds the lock ("{<prefix><name>}"; for a
// read hold or a permit, the sorted set that holds it; for a LockAll lock,
// its first name's key), for tools and tests that inspect or break it (see
// package redlocktest).
func (l *Lock) Key() string { return l.ref().Key() }

// TTL asks the server for the lock's remaining lease, as bsm/redislock's
// Lock.TTL does: the key's PTTL while it still holds this lock's owner
// value. On a Redlock it is the lease that a quorum of masters still grants
// (the quorum-th longest). It returns an error matching ErrNotHeld when the
// key is gone or another owner's (on too many masters), and another error
// when too few nodes answered within the node timeout. It does not look at
// the local state: use [Lock.Err] or [Lock.Until] for that, which cost no
// round trip and are the safer bound (they subtract drift).
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) { return l.ref().TTL(ctx) }

// Valid reports whether the lock is still held: locally (Err is nil) and on
// the server (a quorum of nodes still hold its owner value), as redsync's
// Valid does, but never true after Until. An error means the server could
// not be asked; false with a nil error means it is not held.
func (l *Lock) Valid(ctx context.Context) (bool, error) { return l.ref().Valid(ctx) }

// Names returns the names a lock holds: those of a [Locker.LockAll], in
// their global order, or the one name of any other lock.
func (l *Lock) Names() []string { return l.ref().Names() }
