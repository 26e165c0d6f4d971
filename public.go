package redlock

import (
	"context"
	"fmt"
	"time"
)

// say is how the engine names what users see: the root package's sentinel
// errors and error types, which the engine does not build itself. The root
// package fills it once, before any Locker exists (errors.go's init), and
// only reads follow.
var say vocabulary

// vocabulary: the sentinels, and the constructors and readers of the
// public error types (errors.go, errjoin.go, loss.go).
type vocabulary struct {
	errClosed, errNotObtained, errNotHeld, errLost, errReleased, errUnreachable error
	// errAlreadyReleased is Unlock's answer on a lock released before;
	// errNilLock what the methods of a nil *Lock report.
	errAlreadyReleased, errNilLock error

	join        func(errs ...error) error                    // one error of several, nodes' errors grouped
	quiet       func(err error) error                        // err, matched but not printed by join
	parts       func(err error) ([]error, bool)              // the parts of a join's error
	notHeld     func(op, name string, cause error) error     // op found name not held
	notObtained func(name string) error                      // name not obtained
	nodeError   func(node int, addr string, err error) error // a *NodeError
	// nodeOf reads err if it is a *NodeError (not what it wraps): the node
	// and its error.
	nodeOf func(err error) (node int, cause error, ok bool)
	// newAlloc makes a Lock and returns the place of its state, and the
	// Lock itself as the state's user: one allocation for both.
	newAlloc func() (*lockAlloc, any)
	// reason is the LossReason r, an error (RenewEvent.Err).
	reason func(r lossReason) error
	taken  func(name, owner string, ttl time.Duration, nodes []int) error // a *TakenError
	// takenBy reads err's *TakenError: the name and holder.
	takenBy     func(err error) (name, owner string, ok bool)
	replicaAcks func(acked, wanted int, timeout time.Duration) error    // a *ReplicaAcksError
	lostError   func(name string, reason lossReason, cause error) error // a *LostError
	isLost      func(err error) bool                                    // err is a *LostError
}

// lossReason is a LossReason as the engine names it: the same values.
type lossReason uint8

const (
	lossExpired lossReason = iota + 1
	lossTaken
	lossDeleted
	lossQuorum
	lossClosed
	lossMaxHold
)

var lossName = [...]string{
	lossExpired: "expired",
	lossTaken:   "taken",
	lossDeleted: "deleted",
	lossQuorum:  "quorum",
	lossClosed:  "closed",
	lossMaxHold: "max_hold",
}

var lossText = [...]string{
	lossExpired: "expired: no renewal succeeded before its validity ran out",
	lossTaken:   "taken by another owner",
	lossDeleted: "key deleted or expired on the server",
	lossQuorum:  "quorum of nodes lost",
	lossClosed:  "closed",
	lossMaxHold: "maximum hold time reached",
}

// String is LossReason.String.
func (r lossReason) String() string {
	if int(r) < len(lossName) && lossName[r] != "" {
		return lossName[r]
	}
	return fmt.Sprintf("LossReason(%d)", uint8(r))
}

// text is the reason's long description (LostError.Error).
func (r lossReason) text() string {
	if int(r) < len(lossText) && lossText[r] != "" {
		return lossText[r]
	}
	return r.String()
}

// acquireOutcome is an AcquireOutcome as the engine names it: the same
// values.
type acquireOutcome uint8

const (
	outcomeAcquired acquireOutcome = iota + 1
	outcomeContended
	outcomeCanceled
	outcomeFailed
)

// reporter is an Observer (WithObserver) as the engine calls it; the root
// package's adapter builds the public events (observe.go).
type reporter interface {
	acquired(e acquireNote)
	renewed(e renewNote)
	released(e releaseNote)
	lost(e lossNote)
	// nodeErrors reports every *NodeError in err's tree but those saying
	// the key was another owner's.
	nodeErrors(name, op string, err error)
}

// The events, with the hold in place of its Lock (see AcquireEvent and the
// others for the fields).
type (
	acquireNote struct {
		Ctx                context.Context
		Name               string
		Wait               bool
		Start              time.Time
		Duration, WaitTime time.Duration
		Attempts           int
		Contended          bool
		Outcome            acquireOutcome
		Hold               *hold
		Err                error
	}
	renewNote struct {
		Hold     *hold
		Name     string
		Manual   bool
		TTL      time.Duration
		Start    time.Time
		Duration time.Duration
		Err      error
	}
	releaseNote struct {
		Hold           *hold
		Name           string
		Held, Duration time.Duration
		Err            error
	}
	lossNote struct {
		Hold *hold
		Name string
		Held time.Duration
		Err  error // a *LostError
	}
)

// reportNodes is r.nodeErrors when there is an observer.
func reportNodes(r reporter, name, op string, errs ...error) {
	if r != nil {
		for _, err := range errs { // one by one: a slice passed on would escape, and cost every caller an allocation
			r.nodeErrors(name, op, err)
		}
	}
}

// isTaken reports whether err says another owner holds the lock (a
// *TakenError in its tree).
func isTaken(err error) bool {
	_, _, ok := say.takenBy(err)
	return ok
}
