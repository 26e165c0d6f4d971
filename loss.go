package redlock

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/scripts"
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

// String returns the reason's short name, fit for a log field or a metric
// attribute: "expired", "taken", "deleted", "quorum", "closed", "max_hold".
func (r LossReason) String() string {
	if int(r) < len(lossName) && lossName[r] != "" {
		return lossName[r]
	}
	return fmt.Sprintf("LossReason(%d)", uint8(r))
}

// Error returns the same short name as String, so that a reason prints
// the same with %v and %s; it makes a reason usable as an errors.Is target.
// [LostError.Error] gives the long description.
func (r LossReason) Error() string { return r.String() }

func (r LossReason) text() string {
	if int(r) < len(lossText) && lossText[r] != "" {
		return lossText[r]
	}
	return r.String()
}

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
		if e.Reason != LossQuorum && (errors.Is(p, errKeyGone) || errors.Is(p, node.ErrTaken) || errors.Is(p, errExpLate)) {
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

// refusalReason names what the refusing nodes said when a renewal or Extend
// found the lock no longer ours on too many of them: taken nodes held another
// owner's value, late ones a lease too near its end to move (the holder's
// validity ran out first), the rest of the no nodes had no key.
func refusalReason(no, taken, late int) LossReason {
	switch {
	case taken == no:
		return LossTaken
	case late == no:
		return LossExpired
	case taken == 0 && late == 0:
		return LossDeleted
	}
	return LossQuorum
}

// What one node's refusal of a renewal or Extend said, for the error a loss
// carries (a NodeError each).
var (
	errKeyGone = errors.New("key gone")
	errExpLate = errors.New("lease too near its end to move")
)

// refusalOf is the reason behind one node's refusal code.
func refusalOf(code int64) error {
	switch code {
	case scripts.ReplyTaken:
		return node.ErrTaken
	case scripts.ReplyLate:
		return errExpLate
	}
	return errKeyGone
}

// errNoRenewal is what a loss by time heard when the renewal in flight had
// not answered by then.
var errNoRenewal = errors.New("the renewal in flight had not answered")

// refusalsIn counts the replies of an Extend round that found another
// owner's value, and those that found the lease too near its end.
func refusalsIn(rs []reply) (taken, late int) {
	for _, r := range rs {
		switch {
		case r.err != nil:
		case r.code == scripts.ReplyTaken:
			taken++
		case r.code == scripts.ReplyLate:
			late++
		}
	}
	return taken, late
}

// expire runs when the loss clock says Until is (nearly) here, and from Err
// once it has passed.
func (l *hold) expire() {
	if lost, _ := l.expireLocked(0); lost {
		l.eng.ended(l, stateLost)
	}
}

// expireLocked marks the lock lost if its Until is less than its loss lead
// plus extra away, closing Done; the engine's ended must follow when it
// reports lost. Otherwise rearm, when not zero, is when the loss clock
// must look at it again.
//
// Of extra, a lock takes at most an eighth of its TTL: a healthy lock is
// renewed while more than two thirds of its TTL are left, so no renewal
// that still arrives in time is overtaken. Due by extra but not by that
// share, it goes back on the loss clock for the moment it is.
func (l *hold) expireLocked(extra time.Duration) (lost bool, rearm time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateHeld {
		return false, time.Time{}
	}
	own := min(extra, l.ttl/8)
	if l.pastHoldEnd(own) {
		return l.loseLocked(LossMaxHold, nil), time.Time{}
	}
	if time.Until(l.until) > lossLead(l.ttl, l.driftFactor)+own {
		mark := l.lossAt()
		if time.Until(mark) <= extra {
			// Due by extra, not by its own share: the clock pops a lock
			// extra ahead of its mark, so the mark moves by the difference.
			return false, mark.Add(extra - own)
		} // else a renewal moved Until meanwhile, and re-armed it
		return false, time.Time{}
	}
	reason, err := LossExpired, l.renewErr
	if l.renewRefused {
		// Some masters said the key was no longer ours, the others did not
		// answer: a Redlock that lost its quorum.
		reason = LossQuorum
	}
	if err == nil && l.autoRenew {
		err = errNoRenewal // a renewal hangs on an unresponsive server
	}
	return l.loseLocked(reason, err), time.Time{}
}

// lose marks a held lock lost for reason, with err as what the library
// last heard, and does the bookkeeping; false if it was no longer held.
func (l *hold) lose(reason LossReason, err error) bool {
	l.mu.Lock()
	changed := l.loseLocked(reason, err)
	l.mu.Unlock()
	if changed {
		l.eng.ended(l, stateLost)
	}
	return changed
}

// renewFailed records a renewal that did not succeed, for the reason a
// later loss by time reports.
func (l *hold) renewFailed(err error, refused bool) {
	l.mu.Lock()
	l.renewErr, l.renewRefused = err, refused
	l.mu.Unlock()
}

// renewed records a successful extension, and returns when the loss clock
// is now to declare the lock lost; false if the lock is gone.
func (l *hold) renewed(ttl time.Duration, until time.Time) (lossAt time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateHeld || !time.Now().Before(l.until) || l.pastHoldEnd(0) {
		return time.Time{}, false // lost meanwhile (or due to be: Err would say so)
	}
	l.ttl = ttl
	l.until = until
	l.setGuard()
	l.renewErr, l.renewRefused = nil, false
	return l.lossAt(), true
}
