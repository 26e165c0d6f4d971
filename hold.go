package redlock

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

// hold is a Lock's state: its identity, lease and status, and what the
// engine keeps for it (this file: data and transitions, no I/O). The
// engine handles holds; a user is handed the Lock around one (user).
type hold struct {
	user    any // the *Lock this is the state of (say.newAlloc); nil only in tests of the engine's own
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
	obs           reporter // nil: none (WithObserver)
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

// lockedUntil is the end of l's local validity (Lock.Until).
func (l *hold) lockedUntil() time.Time {
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
		return say.errNilLock
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
		return say.errNilLock
	}
	return observedUnlock(ctx, l)
}

// Extend is [Lock.Extend].
func (l *hold) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return say.errNilLock
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
	return fns, l.errLocked(l.name), l.lossReason == lossMaxHold
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
		return 0, say.errNilLock
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
	case errors.Is(err, say.errNotHeld):
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
	reportNodes(l.obs, l.name, opRelease, err)
	l.obs.released(releaseNote{Hold: l, Name: l.name, Held: heldFor(l), Duration: time.Since(start), Err: err})
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

// Names is [Lock.Names].
func (l *hold) Names() []string {
	switch {
	case l == nil:
		return nil
	case l.multi != nil:
		return slices.Clone(l.multi.names)
	}
	return []string{l.name}
}
