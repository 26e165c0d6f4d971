package engine

import (
	"context"
	"time"
)

// Drift is the Redlock spec's allowance for clock drift between processes:
// ttl*factor, plus 2ms for Redis's expiry precision (0-1ms) and rounding.
func Drift(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + 2*time.Millisecond
}

// ValidUntil is the end of local validity of a lease of ttl requested at t1:
// t1 + ttl - drift. t1 must be read from the monotonic clock (time.Now)
// immediately before the first request is sent: every key the request sets
// expires no earlier than t1 + ttl on the server, so no other owner can be
// granted the name before the returned instant. This is the spec's
// TTL - (T2-T1) - drift in absolute form; acquire, extend and renew all use it,
// and the caller checks time.Now() against it as the last step, after every
// round trip, so a pause anywhere before the return is caught.
func ValidUntil(t1 time.Time, ttl time.Duration, factor float64) time.Time {
	return t1.Add(validFor(ttl, factor))
}

// sentAt is the t1 that ValidUntil turned into until for a lease of ttl:
// when that lease was sent.
func sentAt(until time.Time, ttl time.Duration, factor float64) time.Time {
	return until.Add(-validFor(ttl, factor))
}

// validFor is how long after its send a lease of ttl is valid.
func validFor(ttl time.Duration, factor float64) time.Duration {
	// The server gets whole milliseconds (ttlMillis): count no more.
	ttl = max(ttl.Truncate(time.Millisecond), time.Millisecond)
	return ttl - Drift(ttl, factor)
}

// TimerLead is the least time before Until that a lock is declared lost, so
// that Done closes by Until although the loss clock wakes a little late; see
// lossLead for the whole lead.
const TimerLead = time.Millisecond

// lossLead is how long before Until the loss clock declares a lock with a
// lease of ttl lost: 1ms plus half the drift allowance. Renewals run a third of
// the way into a lease, so Until only comes near after two thirds of a TTL
// of failed renewals, and giving up a few milliseconds early costs nothing
// but a renewal that would have made it at the very last moment; in
// exchange a loss clock delayed by a loaded machine (a goroutine waiting for
// a CPU, a GC cycle) still closes Done before the server can grant the name
// to another owner.
func lossLead(ttl time.Duration, driftFactor float64) time.Duration {
	return TimerLead + Drift(ttl, driftFactor)/2
}

// pastHoldEnd reports that the lock's maximum hold time is over, or will be
// within extra (the Lock's mu held).
func (le *lease) pastHoldEnd(extra time.Duration) bool {
	return !le.holdEnd.IsZero() && !time.Now().Add(extra).Before(le.holdEnd)
}

// lossAt is when the loss clock should declare the lock lost (the Lock's
// mu held): ahead of Until by the loss lead, or at the end of its maximum
// hold time if that comes first.
func (le *lease) lossAt() time.Time {
	at := le.Until.Add(-lossLead(le.ttl, le.driftFactor))
	if !le.holdEnd.IsZero() && le.holdEnd.Before(at) {
		return le.holdEnd
	}
	return at
}

// setGuard records the guard of the lease in force, confirmed now (the
// Lock's mu held).
func (le *lease) setGuard() { le.guard = guardOf(le.ttl, le.Until, le.driftFactor) }

// guardOf is the guard (see guardMillis) of a lease of ttl valid until
// until, confirmed now: with c-t1 = ttl-drift-(until-now), it is
// ttl-(until-now)+lossLead.
func guardOf(ttl time.Duration, until time.Time, driftFactor float64) time.Duration {
	return ttl - time.Until(until) + lossLead(ttl, driftFactor)
}

// lease is a held lock's validity as the holder reckons it, guarded by the
// Lock's mu: the lease in force (ttl, sent at a time that makes Until), the
// renewal guard, and the end of its maximum hold.
type lease struct {
	ttl         time.Duration
	Until       time.Time
	guard       time.Duration // see guardMillis
	holdEnd     time.Time     // when MaxHold runs out; zero without a cap
	driftFactor float64
	// unsure: an Extend's outcome is unknown, so the key may carry its
	// lease or the one before it (see Hold.extendUnknown), until a renewal
	// or Extend succeeds.
	unsure bool
}

// ctxEnded is ctx.Err(), or context.DeadlineExceeded once ctx's deadline
// has passed though its timer has not fired yet: a call bounded by that
// deadline can return before the timer does, and must then still say that
// its ctx ended.
func ctxEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}
