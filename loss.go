package redlock

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/node"
)

// LossReason says why a held lock stopped being held without an Unlock. It
// is an error itself, so errors.Is(lock.Err(), LossTaken) asks for one
// reason; [LostError] carries it with what the library last heard.
type LossReason uint8

// The reasons a lock is lost. On a Redlock, a reason that names what the
// nodes said (taken, deleted) is given when every refusing node said the
// same; a mix of answers is LossQuorum.
const (
	// LossExpired: no renewal succeeded before Until (the server was
	// unreachable, paused or too slow), or, with auto-renew off, the lease
	// ran out. LostError.Err holds the last renewal's error, if any.
	LossExpired LossReason = iota + 1
	// LossTaken: a renewal or Extend found the key holding another owner's
	// value.
	LossTaken
	// LossDeleted: a renewal or Extend found the key gone (deleted, or
	// expired on the server while this process was paused).
	LossDeleted
	// LossQuorum: on a Redlock, too few masters still held the key, with
	// mixed answers (some gone, some another owner's, some unreachable).
	LossQuorum
	// LossClosed: Close of the Locker or Redlock released the lock while it
	// was held.
	LossClosed
	// LossMaxHold: the lock was held for the duration given to
	// [WithMaxHold]; the watchdog stopped renewing it and the library
	// released it.
	LossMaxHold
)

// String returns the reason's short name, fit for a log field or a metric
// attribute: "expired", "taken", "deleted", "quorum", "closed", "max_hold".
func (r LossReason) String() string { return engine.LossReason(r).String() }

// Error returns the same short name as String, so that a reason prints
// the same with %v and %s; it makes a reason usable as an errors.Is target.
// [LostError.Error] gives the long description.
func (r LossReason) Error() string { return r.String() }

func (r LossReason) text() string { return engine.LossReason(r).Text() }

// LostError is what [Lock.Err] returns once a lock was lost, and the cause
// of the context [Locker.Do] passes its function when it is cancelled for
// that loss. It matches [ErrLost] and its Reason with errors.Is; one lost by
// Close also matches [ErrClosed] and [ErrReleased].
type LostError struct {
	// Name is the lock's name.
	Name string
	// Reason says why the lock was lost.
	Reason LossReason
	// Err is what the library last heard about the lock, when that explains
	// the loss: the last failed renewal's error (joined [NodeError]s), or
	// nil.
	Err error
}

func (e *LostError) Error() string {
	return fmt.Sprintf("redlock: lock %q %s", e.Name, e.clause())
}

// clause is the loss without the name, and with only the node errors that
// add to the reason: a node's "key gone" under "key deleted or expired on
// the server" would say it twice; under "quorum of nodes lost" each node's
// answer says which way it was lost.
func (e *LostError) clause() string {
	s, sep := "lost: "+e.Reason.text(), ": "
	var parts []error
	if j, ok := e.Err.(*joinedError); ok {
		parts = j.errs
	} else if e.Err != nil {
		parts = []error{e.Err}
	}
	for _, p := range parts {
		if e.Reason != LossQuorum && (errors.Is(p, engine.ErrKeyGone) || errors.Is(p, node.ErrTaken) || errors.Is(p, engine.ErrExpLate)) {
			continue
		}
		if d := strings.TrimPrefix(clauseOf(p), "redlock: "); d != "" && !strings.Contains(s, d) {
			s += sep + d
			sep = "; "
		}
	}
	return s
}

// Is reports whether target is ErrLost or e's Reason (and ErrClosed or
// ErrReleased for a lock that Close released).
func (e *LostError) Is(target error) bool {
	switch target {
	case ErrLost, error(e.Reason):
		return true
	case ErrClosed, ErrReleased:
		return e.Reason == LossClosed
	}
	return false
}

// Unwrap returns Err.
func (e *LostError) Unwrap() error { return e.Err }
