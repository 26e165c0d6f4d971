package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Engine is all a Lock asks of the Locker or Redlock that issued it: the one
// seam between the lock's state (this file: data and transitions, no I/O)
// and the engine that does the I/O and keeps the registries (core). The
// lock calls up only for the I/O its user asks for, and to say that it
// ended; the engine calls down through transitions that return what
// changed, and keeps its own books (the loss clock, the log, observers,
// Do's cancel).
type Engine interface {
	unlock(ctx context.Context, l *Hold) error
	extend(ctx context.Context, l *Hold, ttl time.Duration) error
	remaining(ctx context.Context, l *Hold) (time.Duration, error) // l's lease on the server (Lock.TTL)
	ended(l *Hold, to lockState)                                   // l left stateHeld (or its attempt failed) for to
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

// Hold is a Lock's state: its identity, lease and status, and what the
// engine keeps for it (this file: data and transitions, no I/O). The
// engine handles holds; a user is handed the Lock around one (user).
type Hold struct {
	User    any // the *Lock this is the state of (Say.NewAlloc); nil only in tests of the engine's own
	Eng     Engine
	Name    string
	Owner   string
	Keys    []string // one hash tag; the layout depends on kind (OwnerAndKeys, keys.go)
	Channel string   // where releases are published (internal/pubsub)
	// boxed are the lock key, owner and lease that the acquire command of
	// an exclusive lock boxed, for its release command (releaseArgv).
	boxed     boxedArgs
	fencing   bool
	autoRenew bool
	sharded   bool // its core's nodes are Clusters: its releases publish with SPUBLISH
	// fenceFloor is the fencing argument of its acquire call (acquire.go),
	// or of the hand-off that granted it (handOffArgs).
	fenceFloor floorArg
	// announce: an election's leader, whose release is published whether
	// or not anyone waits (its observers do not mark it, see release.lua).
	announce bool
	Kind     lockKind   // what it holds: the scripts that release and extend it (kinds.go)
	Multi    *multiKeys // the names and keys of a multi-name lock (LockAll), else nil
	permits  int        // a permit's Semaphore size (sem_acquire.lua), else 0
	// WithReplicaAcks, packed into the padding after the bools so that a
	// Lock without acks costs no more memory than before: replicas (0: no
	// WAIT) and the ack timeout in milliseconds (validate bounds both).
	replicas      uint16
	ackMillis     int32
	renewInterval time.Duration
	timeout       time.Duration
	logger        *slog.Logger
	obs           Reporter // nil: none (WithObserver)
	Token         int64    // set once, before the Lock is returned

	// IO serialises Extend with the watchdog's renewal of this lock, so the
	// validity recorded locally always belongs to the last lease sent.
	IO ioMutex

	Mu     sync.Mutex
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
	Metadata     string        // WithMetadata; stored at keys[4] when not ""
	// counterUntil is when the fence counter may expire at the earliest, as
	// far as the grant's life for it tells; a renewal past it keeps the
	// counter alive too (companions). Zero: unknown, always kept.
	counterUntil time.Time
	// acquired is when the lock became held; set only for the observer and
	// the max hold, which need it.
	acquired time.Time
	onEnds   []func(cause error)

	renewal Slot       // in the watchdog's heap, guarded by its mutex
	Loss    Slot       // in the loss clock's heap, guarded by its mutex
	trk     *lockTrack // credits for its own writes (track_credit.go); nil without tracking
	// Proclaims numbers an election leader's announcements (Election.announce).
	Proclaims atomic.Int64
}

// ioMutex is a mutex whose LockCtx gives up when a ctx ends: the watchdog
// holds a lock's IO for a whole renewal batch, which on a paused server lasts
// until the lock's Until, and an Extend must not wait past its own ctx for
// it. It is safe for concurrent use; the zero value is unlocked. Uncontended
// it allocates nothing (a Hold is made per acquire attempt, on the hot path):
// the channel that waiters park on is made only when one has to wait. A
// channel made with every Hold would cost an allocation each, and a
// sync.Mutex cannot be waited for with a ctx but by polling TryLock. It is
// one word, as the sync.Mutex it replaces: a Lock (888 bytes) plus the 8-byte
// header of a large object fills the 896-byte size class, and a word more
// (a held flag beside a mutex) would move it up to 1024.
type ioMutex struct {
	// state is nil when unlocked, ioIdle when locked with no waiter, and
	// else the channel the waiters park on, which only Unlock takes out,
	// closing it.
	state atomic.Pointer[chan struct{}]
}

// ioIdle is the state of a locked ioMutex that nobody waits for.
var ioIdle = new(chan struct{})

// TryLock locks m if it is unlocked, and reports whether it did.
func (m *ioMutex) TryLock() bool { return m.state.CompareAndSwap(nil, ioIdle) }

// LockCtx locks m, waiting for it no longer than ctx lasts: it returns
// ctx.Err(), with m not locked by it, when ctx ends first.
func (m *ioMutex) LockCtx(ctx context.Context) error {
	var mine *chan struct{} // made once, installed when m is locked and idle
	for {
		wake := m.state.Load()
		switch {
		case wake == nil:
			if m.TryLock() {
				return nil
			}
			continue
		case wake == ioIdle:
			if mine == nil {
				ch := make(chan struct{})
				mine = &ch
			}
			if !m.state.CompareAndSwap(ioIdle, mine) {
				continue
			}
			wake, mine = mine, nil
		}
		select {
		case <-*wake:
			// Every waiter is woken; one takes m, the others wait again.
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Unlock unlocks m and wakes whoever waits for it. It may be called from
// another goroutine than the one that locked m (the watchdog's renewal
// settles a lock in its round's goroutine), as with a sync.Mutex.
func (m *ioMutex) Unlock() {
	switch wake := m.state.Swap(nil); wake {
	case nil:
		panic("redlock: unlock of an unlocked io mutex")
	case ioIdle:
	default:
		close(*wake)
	}
}

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

// metaValue is what l stores at its metadata key: its owner value first, so
// that a holder after it without metadata never shows l's.
func metaValue(owner, metadata string) string { return owner + "\n" + metadata }

// LockedUntil is the end of l's local validity (Lock.Until).
func (l *Hold) LockedUntil() time.Time {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	return l.Until
}

// Done is [Lock.Done].
func (l *Hold) Done() <-chan struct{} {
	if l == nil {
		return closedChan
	}
	l.Mu.Lock()
	defer l.Mu.Unlock()
	if l.done == nil { // made on first use: most locks end unasked
		l.done = doneChan(l.state)
	}
	return l.done
}

// Err is [Lock.Err].
func (l *Hold) Err() error {
	if l == nil {
		return Say.ErrNilLock
	}
	l.Mu.Lock()
	if l.state == stateHeld && (!time.Now().Before(l.Until) || l.pastHoldEnd(0)) {
		l.Mu.Unlock()
		l.expire()
		l.Mu.Lock()
	}
	defer l.Mu.Unlock()
	return l.errLocked(l.Name)
}

// Unlock is [Lock.Unlock].
func (l *Hold) Unlock(ctx context.Context) error {
	if l == nil {
		return Say.ErrNilLock
	}
	return observedUnlock(ctx, l)
}

// Extend is [Lock.Extend].
func (l *Hold) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return Say.ErrNilLock
	}
	if err := checkTTL(ttl, l.driftFactor); err != nil {
		return fmt.Errorf("redlock: Extend: %w", err)
	}
	return observedExtend(ctx, l, ttl)
}

func (l *Hold) leaseTTL() time.Duration {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	return l.ttl
}

// is reports whether l is in state s.
func (l *Hold) is(s lockState) bool {
	l.Mu.Lock()
	defer l.Mu.Unlock()
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
func (l *Hold) guardMillis() int64 {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	return (l.guard + time.Millisecond - 1).Milliseconds()
}

// finish moves a held (or acquiring) lock to a final state.
func (l *Hold) finish(to lockState, why string) bool {
	l.Mu.Lock()
	changed := l.transition(to, why)
	l.Mu.Unlock()
	if changed {
		l.Eng.ended(l, to)
	}
	return changed
}

// ending hands the engine what a lock that stopped being held owes its
// callers: the OnEnd callbacks (taken, so they run once) and their cause,
// and whether it outstayed its maximum hold.
func (l *Hold) ending() (fns []func(cause error), cause error, maxHold bool) {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	fns, l.onEnds = l.onEnds, nil
	return fns, l.errLocked(l.Name), l.lossReason == LossMaxHold
}

// OnEnd runs f once when the lock stops being held, with the reason as
// cause (at once if it already has).
func (l *Hold) OnEnd(f func(cause error)) {
	l.Mu.Lock()
	if l.state == stateHeld {
		l.onEnds = append(l.onEnds, f)
		l.Mu.Unlock()
		return
	}
	cause := l.errLocked(l.Name)
	l.Mu.Unlock()
	f(cause)
}

// checkTTL validates a lease length.
func checkTTL(ttl time.Duration, factor float64) error {
	switch {
	case ttl < time.Millisecond:
		return fmt.Errorf("TTL must be at least 1ms, got %v", ttl)
	case ttl > MaxTTL:
		return fmt.Errorf("TTL must be at most %v, got %v", MaxTTL, ttl)
	case Drift(ttl, factor) >= ttl.Truncate(time.Millisecond):
		return fmt.Errorf("TTL %v leaves no validity after the drift allowance of %v", ttl, Drift(ttl, factor))
	}
	return nil
}

// heldFor is how long l has been held, up to its end if it ended.
func heldFor(l *Hold) time.Duration {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	if !l.Ended.IsZero() {
		return l.Ended.Sub(l.acquired)
	}
	return time.Since(l.acquired)
}

// Key is [Lock.Key].
func (l *Hold) Key() string {
	if l == nil {
		return ""
	}
	return l.Keys[0]
}

// TTL is [Lock.TTL].
func (l *Hold) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil {
		return 0, Say.ErrNilLock
	}
	return l.Eng.remaining(ctx, l)
}

// Valid is [Lock.Valid].
func (l *Hold) Valid(ctx context.Context) (bool, error) {
	if l.Err() != nil {
		return false, nil
	}
	d, err := l.TTL(ctx)
	switch {
	case errors.Is(err, Say.ErrNotHeld):
		return false, nil
	case err != nil:
		return false, err
	}
	return d != 0 && l.Err() == nil, nil
}

// observedUnlock is Lock.Unlock, reported to the observer when there is
// one: the release's node errors and its outcome.
func observedUnlock(ctx context.Context, l *Hold) error {
	if l.obs == nil {
		return l.Eng.unlock(ctx, l)
	}
	start := time.Now()
	err := l.Eng.unlock(ctx, l)
	ReportNodes(l.obs, l.Name, opRelease, err)
	l.obs.Released(ReleaseNote{Hold: l, Name: l.Name, Held: heldFor(l), Duration: time.Since(start), Err: err})
	return err
}

// observedExtend is Lock.Extend, reported to the observer when there is one.
func observedExtend(ctx context.Context, l *Hold, ttl time.Duration) error {
	if l.obs == nil {
		return l.Eng.extend(ctx, l, ttl)
	}
	start := time.Now()
	err := l.Eng.extend(ctx, l, ttl)
	observeRenew(l, true, ttl, start, err, err)
	return err
}

// Names is [Lock.Names].
func (l *Hold) Names() []string {
	switch {
	case l == nil:
		return nil
	case l.Multi != nil:
		return slices.Clone(l.Multi.Names)
	}
	return []string{l.Name}
}
