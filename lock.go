package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// engine is all a Lock asks of the Locker or Redlock that issued it: the one
// seam between the lock's state (this file: data and transitions, no I/O)
// and the engine that does the I/O and keeps the registries (core). The
// lock calls up only for the I/O its user asks for, and to say that it
// ended; the engine calls down through transitions that return what
// changed, and keeps its own books (the loss clock, the log, observers,
// Do's cancel).
type engine interface {
	unlock(ctx context.Context, l *hold) error
	extend(ctx context.Context, l *hold, ttl time.Duration) error
	remaining(ctx context.Context, l *hold) (time.Duration, error) // l's lease on the server (Lock.TTL)
	ended(l *hold, to lockState)                                   // l left stateHeld (or its attempt failed) for to
}

const (
	stateAcquiring lockState = iota // an attempt in flight; never seen by users
	stateHeld
	stateLost
	stateReleased
	stateFailed // the attempt that made it did not obtain the lock
)

// boxedArgs are script arguments boxed once for two commands; queue is
// nil when the acquire command did not carry the queue key.
type boxedArgs struct{ key, owner, lease, queue, waiting any }

// whyClosed is the reason of a lock released by Close.
const whyClosed = "closed"

// Lock is a held lock: the handle one successful Lock, TryLock or Do returns.
// Its identity (name, owner value, fencing token) never changes; a new
// acquisition always returns a new Lock with a fresh owner value, so a stale
// handle can never release or extend a later holder's lock.
//
// A Lock is safe for concurrent use by multiple goroutines. Exactly one of
// several concurrent Unlock calls returns nil. The methods of a nil *Lock
// do not panic: it is not held.
type Lock struct {
	h hold
}

// ref is the state of l, nil for a nil l (whose methods then report a lock
// that is not held).
func (l *Lock) ref() *hold {
	if l == nil {
		return nil
	}
	return &l.h
}

// lock is the handle of h, nil for a nil h.
func (h *hold) lock() *Lock {
	if h == nil {
		return nil
	}
	return h.user
}

// handle is what an acquire call returns to its user: the handle of h.
func handle(h *hold, err error) (*Lock, error) { return h.lock(), err }

// Name returns the lock's name as given to the acquire call; for a
// [Locker.LockAll] lock, its names in order, joined by commas (see Names).
func (l *Lock) Name() string { return l.ref().Name() }

// Owner returns the random owner value (a UUID) stored in Redis under the
// lock's key while it is held.
func (l *Lock) Owner() string { return l.ref().Owner() }

// Metadata returns what [WithMetadata] attached to the lock, "" if nothing.
func (l *Lock) Metadata() string { return l.ref().Metadata() }

// Token returns the lock's fencing token: strictly increasing across
// acquisitions of one name, and >= 1. Pass it to a [Fence] or [RedisFence]
// guarding the resource. It is 0 when fencing is off ([WithFencing]) and
// for a read hold ([Locker.RLock]), which shares the name and so cannot be
// told apart by a token; a [Semaphore]'s permits count on their own, and a
// [Locker.LockAll] lock has one token valid for each of its names.
func (l *Lock) Token() int64 { return l.ref().Token() }

// Until returns the end of the lock's local validity: the instant read before
// the last successful acquire, extend or renewal was sent, plus its TTL,
// minus the drift allowance. No other owner can be granted the name before
// it. The value carries a monotonic clock reading; compare it with time.Now
// or time.Until, not after serialising it.
func (l *Lock) Until() time.Time { return l.ref().Until() }

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
// sending anything. It returns nil once a quorum of nodes (the one node of a
// Locker) released it, without waiting for nodes that do not answer; a
// release that Redis carried out but whose reply was lost, and that go-redis
// retried, still returns nil. It returns an error matching ErrNotHeld when
// the lock was already released, was lost, or the nodes say it is no longer
// ours; any other error means the outcome is unknown on too many nodes: the
// release is then sent again in the background to each node that did not
// answer, until it runs there (a paused server, a silent link that heals)
// or for three leases (10s at least), so the name is free right after
// the fault rather than at the lease's end. Cancelling ctx does not stop
// the release: it runs detached from ctx, bounded by the node timeout, so a
// cancelled caller still unlocks. When a goroutine of the same Locker waits
// for the name, Unlock hands the lock to the first of them in the same
// script that releases it, unless a waiter of another process queued for
// the name first: then, as whenever a waiter of another process is queued,
// the name is reserved for that waiter and only it is woken (a Locker
// only; a Redlock releases and lets its waiters acquire).
func (l *Lock) Unlock(ctx context.Context) error { return l.ref().Unlock(ctx) }

// Extend sets the lock's lease to ttl from now on every node where it is
// still ours, and moves Until accordingly; later renewals use ttl too (and
// come no later than halfway through its validity). It never re-creates an
// expired key. It succeeds only when a quorum of nodes (the one node of a
// Locker) extended within the new validity. It returns an error matching
// ErrNotHeld when the lock is no longer held (the lock is then marked lost),
// an error for a ttl out of range, and another error when too many nodes
// failed to answer, in which case the lock stays held until its current
// Until.
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

// hold is a Lock's state: its identity, lease and status, and what the
// engine keeps for it (this file: data and transitions, no I/O). The
// engine handles holds; a user is handed the Lock around one (user).
type hold struct {
	user    *Lock // the handle this is the state of (lockAlloc); nil only in tests of the engine's own
	eng     engine
	name    string
	owner   string
	keys    []string // one hash tag; the layout depends on kind (ownerAndKeys, keys.go)
	channel string   // where releases are published (pubsub.go)
	// boxed are the lock key, owner and lease that the acquire command of
	// an exclusive lock boxed, for its release command (releaseArgv).
	boxed     boxedArgs
	fencing   bool
	autoRenew bool
	sharded   bool // its core's nodes are Clusters: its releases publish with SPUBLISH
	// fenceFloor is the fencing argument of its acquire call (acquire.go).
	fenceFloor floorArg
	// announce: an election's leader, whose release is published whether
	// or not anyone waits (its observers do not mark it, see release.lua).
	announce bool
	kind     lockKind   // what it holds: the scripts that release and extend it (kinds.go)
	multi    *multiKeys // the names and keys of a multi-name lock (LockAll), else nil
	permits  int        // a permit's Semaphore size (sem_acquire.lua), else 0
	// WithReplicaAcks, packed into the padding after the bools so that a
	// Lock without acks costs no more memory than before: replicas (0: no
	// WAIT) and the ack timeout in milliseconds (validate bounds both).
	replicas      uint16
	ackMillis     int32
	renewInterval time.Duration
	timeout       time.Duration
	logger        *slog.Logger
	obs           Observer // nil: none (WithObserver)
	token         int64    // set once, before the Lock is returned

	// io serialises Extend with the watchdog's renewal of this lock, so the
	// validity recorded locally always belongs to the last lease sent.
	io sync.Mutex

	mu     sync.Mutex
	status // guarded by mu
	lease  // guarded by mu
	// outcome[i] is what node i's acquire call returned, or pending while it
	// is in flight. A call that returns after the lock stopped being live
	// releases its own grant (see settle). Once held, gone marks a node
	// where a renewal found the key gone (noteGone, repair.go).
	outcome outcomes
	// rel: where the lock's releases were sent, and those Unlock left to
	// the acquire call of a node that had not answered yet (settle).
	rel releases
	// renewErr is the last failed renewal's error, and renewRefused whether
	// some node then said the key was no longer ours: what a loss by time
	// reports.
	renewErr     error
	renewRefused bool
	maxHold      time.Duration // 0: no cap (WithMaxHold)
	metadata     string        // WithMetadata; stored at keys[4] when not ""
	// counterUntil is when the fence counter may expire at the earliest, as
	// far as the grant's life for it tells; a renewal past it keeps the
	// counter alive too (companions). Zero: unknown, always kept.
	counterUntil time.Time
	// acquired is when the lock became held; set only for the observer and
	// the max hold, which need it.
	acquired time.Time
	onEnds   []func(cause error)

	renewal slot       // in the watchdog's heap, guarded by its mutex
	loss    slot       // in the loss clock's heap, guarded by its mutex
	trk     *lockTrack // credits for its own writes (track_credit.go); nil without tracking
	// proclaims numbers an election leader's announcements (Election.announce).
	proclaims atomic.Int64
}

// errAlreadyReleased is Unlock's answer on a lock released before.
var errAlreadyReleased = fmt.Errorf("%w: already released", ErrNotHeld)

// releaseRetryFor bounds how long releaseNode keeps trying on a node that
// does not answer: a server paused for longer runs a grant waiting in its
// sockets when it resumes, and that key then lasts one lease.
const releaseRetryFor = 10 * time.Second

// closedChan is the Done channel of a nil *Lock.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// errNilLock is what the methods of a nil *Lock report.
var errNilLock = fmt.Errorf("%w: nil *Lock", ErrNotHeld)

// Name is [Lock.Name].
func (l *hold) Name() string {
	if l == nil {
		return ""
	}
	return l.name
}

// Owner is [Lock.Owner].
func (l *hold) Owner() string {
	if l == nil {
		return ""
	}
	return l.owner
}

// Metadata is [Lock.Metadata].
func (l *hold) Metadata() string {
	if l == nil {
		return ""
	}
	return l.metadata
}

// metaValue is what l stores at its metadata key: its owner value first, so
// that a holder after it without metadata never shows l's.
func metaValue(owner, metadata string) string { return owner + "\n" + metadata }

// Token is [Lock.Token].
func (l *hold) Token() int64 {
	if l == nil {
		return 0
	}
	return l.token
}

// Until is [Lock.Until].
func (l *hold) Until() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Done is [Lock.Done].
func (l *hold) Done() <-chan struct{} {
	if l == nil {
		return closedChan
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil { // made on first use: most locks end unasked
		l.done = doneChan(l.state)
	}
	return l.done
}

// Err is [Lock.Err].
func (l *hold) Err() error {
	if l == nil {
		return errNilLock
	}
	l.mu.Lock()
	if l.state == stateHeld && (!time.Now().Before(l.until) || l.pastHoldEnd(0)) {
		l.mu.Unlock()
		l.expire()
		l.mu.Lock()
	}
	defer l.mu.Unlock()
	return l.errLocked(l.name)
}

// Unlock is [Lock.Unlock].
func (l *hold) Unlock(ctx context.Context) error {
	if l == nil {
		return errNilLock
	}
	return observedUnlock(ctx, l)
}

// Extend is [Lock.Extend].
func (l *hold) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return errNilLock
	}
	if err := checkTTL(ttl, l.driftFactor); err != nil {
		return fmt.Errorf("redlock: Extend: %w", err)
	}
	return observedExtend(ctx, l, ttl)
}

func (l *hold) leaseTTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// is reports whether l is in state s.
func (l *hold) is(s lockState) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == s
}

// guardMillis is the least remaining lease, in ms, that extend.lua may still
// move: below it the renewal runs too late (a server paused with renewals in
// its sockets runs them when it resumes) and the holder has declared the
// lock lost already, or will before the reply can reach it.
//
// Why it suffices: the lease in force was sent at t1 and confirmed at c, so
// its server expiry E >= t1+ttl (no server runs a command before it is
// sent), later than t1 by at most c-t1, and the holder's loss mark is
// Until-lossLead = t1+ttl-drift-lossLead. A renewal run at a server time s
// with E-s < guard = (c-t1)+drift+lossLead therefore runs after the loss
// mark, and one run before the mark minus (c-t1) is never refused.
func (l *hold) guardMillis() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return (l.guard + time.Millisecond - 1).Milliseconds()
}

// finish moves a held (or acquiring) lock to a final state.
func (l *hold) finish(to lockState, why string) bool {
	l.mu.Lock()
	changed := l.transition(to, why)
	l.mu.Unlock()
	if changed {
		l.eng.ended(l, to)
	}
	return changed
}

// ending hands the engine what a lock that stopped being held owes its
// callers: the onEnd callbacks (taken, so they run once) and their cause,
// and whether it outstayed its maximum hold.
func (l *hold) ending() (fns []func(cause error), cause error, maxHold bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fns, l.onEnds = l.onEnds, nil
	return fns, l.errLocked(l.name), l.lossReason == LossMaxHold
}

// onEnd runs f once when the lock stops being held, with the reason as
// cause (at once if it already has).
func (l *hold) onEnd(f func(cause error)) {
	l.mu.Lock()
	if l.state == stateHeld {
		l.onEnds = append(l.onEnds, f)
		l.mu.Unlock()
		return
	}
	cause := l.errLocked(l.name)
	l.mu.Unlock()
	f(cause)
}

// checkTTL validates a lease length.
func checkTTL(ttl time.Duration, factor float64) error {
	switch {
	case ttl < time.Millisecond:
		return fmt.Errorf("TTL must be at least 1ms, got %v", ttl)
	case ttl > maxTTL:
		return fmt.Errorf("TTL must be at most %v, got %v", maxTTL, ttl)
	case drift(ttl, factor) >= ttl.Truncate(time.Millisecond):
		return fmt.Errorf("TTL %v leaves no validity after the drift allowance of %v", ttl, drift(ttl, factor))
	}
	return nil
}

// heldFor is how long l has been held, up to its end if it ended.
func heldFor(l *hold) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ended.IsZero() {
		return l.ended.Sub(l.acquired)
	}
	return time.Since(l.acquired)
}

// Key is [Lock.Key].
func (l *hold) Key() string {
	if l == nil {
		return ""
	}
	return l.keys[0]
}

// TTL is [Lock.TTL].
func (l *hold) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil {
		return 0, errNilLock
	}
	return l.eng.remaining(ctx, l)
}

// Valid is [Lock.Valid].
func (l *hold) Valid(ctx context.Context) (bool, error) {
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

// observedUnlock is Lock.Unlock, reported to the observer when there is
// one: the release's node errors and its outcome.
func observedUnlock(ctx context.Context, l *hold) error {
	if l.obs == nil {
		return l.eng.unlock(ctx, l)
	}
	start := time.Now()
	err := l.eng.unlock(ctx, l)
	observeNodes(l.obs, l.name, opRelease, err)
	l.obs.OnRelease(ReleaseEvent{Lock: l.lock(), Name: l.name, Held: heldFor(l), Duration: time.Since(start), Err: err})
	return err
}

// observedExtend is Lock.Extend, reported to the observer when there is one.
func observedExtend(ctx context.Context, l *hold, ttl time.Duration) error {
	if l.obs == nil {
		return l.eng.extend(ctx, l, ttl)
	}
	start := time.Now()
	err := l.eng.extend(ctx, l, ttl)
	observeRenew(l, true, ttl, start, err, err)
	return err
}
