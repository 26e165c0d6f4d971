package engine

import (
	"errors"
	"time"

	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/scripts"
)

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

// refusalOf is the reason behind one node's refusal code.
func refusalOf(code int64) error {
	switch code {
	case scripts.ReplyTaken:
		return node.ErrTaken
	case scripts.ReplyLate:
		return ErrExpLate
	}
	return ErrKeyGone
}

// refusalsIn counts the replies of an Extend round that found another
// owner's value, and those that found the lease too near its end.
func refusalsIn(rs []Reply) (taken, late int) {
	for _, r := range rs {
		switch {
		case r.Err != nil:
		case r.Code == scripts.ReplyTaken:
			taken++
		case r.Code == scripts.ReplyLate:
			late++
		}
	}
	return taken, late
}

// expire runs when the loss clock says Until is (nearly) here, and from Err
// once it has passed.
func (l *Hold) expire() {
	if lost, _ := l.expireLocked(0); lost {
		l.Eng.ended(l, stateLost)
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
func (l *Hold) expireLocked(extra time.Duration) (lost bool, rearm time.Time) {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	if l.state != stateHeld {
		return false, time.Time{}
	}
	own := min(extra, l.ttl/8)
	if l.pastHoldEnd(own) {
		return l.loseLocked(LossMaxHold, nil), time.Time{}
	}
	if time.Until(l.Until) > lossLead(l.ttl, l.driftFactor)+own {
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
func (l *Hold) lose(reason LossReason, err error) bool {
	l.Mu.Lock()
	changed := l.loseLocked(reason, err)
	l.Mu.Unlock()
	if changed {
		l.Eng.ended(l, stateLost)
	}
	return changed
}

// renewFailed records a renewal that did not succeed, for the reason a
// later loss by time reports.
func (l *Hold) renewFailed(err error, refused bool) {
	l.Mu.Lock()
	l.renewErr, l.renewRefused = err, refused
	l.Mu.Unlock()
}

// renewed records a successful extension, and returns when the loss clock
// is now to declare the lock lost; false if the lock is gone.
func (l *Hold) renewed(ttl time.Duration, until time.Time) (lossAt time.Time, ok bool) {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	if l.state != stateHeld || !time.Now().Before(l.Until) || l.pastHoldEnd(0) {
		return time.Time{}, false // lost meanwhile (or due to be: Err would say so)
	}
	l.ttl = ttl
	l.Until = until
	l.setGuard()
	l.unsure = false
	l.renewErr, l.renewRefused = nil, false
	return l.lossAt(), true
}

// extendUnknown records an Extend to a lease of ttl, sent so that it is
// valid until until, whose outcome is unknown (a node that did not answer
// may have run it, or run it later): the key carries that lease or the one
// before it. l is then valid only until the earlier of the two, and its
// guard, which keeps a late renewal from reviving a lease its holder has
// given up, covers both. It reports whether Until moved earlier, and the
// loss clock's new time; false if l is no longer held.
func (l *Hold) extendUnknown(ttl time.Duration, until time.Time) (lossAt time.Time, earlier, ok bool) {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	if l.state != stateHeld {
		return time.Time{}, false, false
	}
	l.unsure = true
	l.guard = max(l.guard, guardOf(ttl, until, l.driftFactor))
	if until.Before(l.Until) {
		l.Until = until
		earlier = true
	}
	return l.lossAt(), earlier, true
}

// What one node's refusal of a renewal or Extend said, for the error a loss
// carries (a NodeError each).
var (
	ErrKeyGone = errors.New("key gone")
	ErrExpLate = errors.New("lease too near its end to move")
)

// errNoRenewal is what a loss by time heard when the renewal in flight had
// not answered by then.
var errNoRenewal = errors.New("the renewal in flight had not answered")
