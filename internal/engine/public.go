package engine

import (
	"context"
	"fmt"
	"time"
)

// Say is how the engine names what users see: the root package's sentinel
// errors and error types, which the engine does not build itself. The root
// package fills it once, before any Locker exists (errors.go's init), and
// only reads follow.
var Say Vocabulary

// Vocabulary: the sentinels, and the constructors and readers of the
// public error types (the root package's errors.go, errjoin.go, loss.go).
type Vocabulary struct {
	ErrClosed, ErrNotObtained, ErrNotHeld, ErrLost, ErrReleased, ErrUnreachable error
	// ErrAlreadyReleased is Unlock's answer on a lock released before;
	// ErrNilLock what the methods of a nil *Lock report.
	ErrAlreadyReleased, ErrNilLock error

	Join        func(errs ...error) error                    // one error of several, nodes' errors grouped
	Quiet       func(err error) error                        // err, matched but not printed by join
	Parts       func(err error) ([]error, bool)              // the parts of a join's error
	NotHeld     func(op, name string, cause error) error     // op found name not held
	NotObtained func(name string) error                      // name not obtained
	NodeError   func(node int, addr string, err error) error // a *NodeError
	// NodeOf reads err if it is a *NodeError (not what it wraps): the node
	// and its error.
	NodeOf func(err error) (node int, cause error, ok bool)
	// NewAlloc makes a Lock and returns the place of its state, and the
	// Lock itself as the state's user: one allocation for both.
	NewAlloc func() (*LockAlloc, any)
	// Reason is the LossReason r, an error (RenewEvent.Err).
	Reason func(r LossReason) error
	Taken  func(name, owner string, ttl time.Duration, nodes []int) error // a *TakenError
	// TakenBy reads err's *TakenError: the name and holder.
	TakenBy     func(err error) (name, owner string, ok bool)
	ReplicaAcks func(acked, wanted int, timeout time.Duration) error    // a *ReplicaAcksError
	LostError   func(name string, reason LossReason, cause error) error // a *LostError
	IsLost      func(err error) bool                                    // err is a *LostError
}

// LossReason is the root package's LossReason as the engine names it:
// the same values (checked in the root package's errors.go).
type LossReason uint8

const (
	LossExpired LossReason = iota + 1
	LossTaken
	LossDeleted
	LossQuorum
	LossClosed
	LossMaxHold
)

var lossName = [...]string{
	LossExpired: "expired",
	LossTaken:   "taken",
	LossDeleted: "deleted",
	LossQuorum:  "quorum",
	LossClosed:  "closed",
	LossMaxHold: "max_hold",
}

var lossText = [...]string{
	LossExpired: "expired: no renewal succeeded before its validity ran out",
	LossTaken:   "taken by another owner",
	LossDeleted: "key deleted or expired on the server",
	LossQuorum:  "quorum of nodes lost",
	LossClosed:  "closed",
	LossMaxHold: "maximum hold time reached",
}

// String is LossReason.String.
func (r LossReason) String() string {
	if int(r) < len(lossName) && lossName[r] != "" {
		return lossName[r]
	}
	return fmt.Sprintf("LossReason(%d)", uint8(r))
}

// Text is the reason's long description (LostError.Error).
func (r LossReason) Text() string {
	if int(r) < len(lossText) && lossText[r] != "" {
		return lossText[r]
	}
	return r.String()
}

// AcquireOutcome is the root package's AcquireOutcome as the engine names
// it: the same values.
type AcquireOutcome uint8

const (
	OutcomeAcquired AcquireOutcome = iota + 1
	OutcomeContended
	OutcomeCanceled
	OutcomeFailed
)

// Reporter is an Observer (WithObserver) as the engine calls it; the root
// package's adapter builds the public events (observe.go).
type Reporter interface {
	Acquired(e AcquireNote)
	Renewed(e RenewNote)
	Released(e ReleaseNote)
	Lost(e LossNote)
	// NodeErrors reports every *NodeError in err's tree but those saying
	// the key was another owner's.
	NodeErrors(name, op string, err error)
}

// The events, with the hold in place of its Lock (see AcquireEvent and the
// others for the fields).
type (
	AcquireNote struct {
		Ctx                context.Context
		Name               string
		Wait               bool
		Start              time.Time
		Duration, WaitTime time.Duration
		Attempts           int
		Contended          bool
		Outcome            AcquireOutcome
		Hold               *Hold
		Err                error
	}
	RenewNote struct {
		Hold     *Hold
		Name     string
		Manual   bool
		TTL      time.Duration
		Start    time.Time
		Duration time.Duration
		Err      error
	}
	ReleaseNote struct {
		Hold           *Hold
		Name           string
		Held, Duration time.Duration
		Err            error
	}
	LossNote struct {
		Hold *Hold
		Name string
		Held time.Duration
		Err  error // a *LostError
	}
)

// ReportNodes is r.nodeErrors when there is an observer.
func ReportNodes(r Reporter, name, op string, errs ...error) {
	if r != nil {
		for _, err := range errs { // one by one: a slice passed on would escape, and cost every caller an allocation
			r.NodeErrors(name, op, err)
		}
	}
}

// isTaken reports whether err says another owner holds the lock (a
// *TakenError in its tree).
func isTaken(err error) bool {
	_, _, ok := Say.TakenBy(err)
	return ok
}
