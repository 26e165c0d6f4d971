package engine

import (
	"context"
	"time"
)

// Operations named in NodeErrorEvent.Op.
const (
	OpAcquire = "acquire"
	OpRenew   = "renew"
	opExtend  = "extend"
	opRelease = "release"
)

// noteEnd tells the observer and the log that l stopped being held for to,
// with cause.
func noteEnd(l *Hold, to lockState, cause error) {
	if l.obs != nil && to != stateFailed {
		if Say.IsLost(cause) {
			l.obs.Lost(LossNote{Hold: l, Name: l.Name, Held: heldFor(l), Err: cause})
		}
	}
	if to == stateLost {
		l.logger.Warn("redlock: lock lost", "name", l.Name, "token", l.Token, "reason", l.why)
	}
}

// observeRenew reports one renewal or Extend of l, whose outcome is err
// and whose failing nodes are in nodeErrs.
func observeRenew(l *Hold, manual bool, ttl time.Duration, start time.Time, err, nodeErrs error) {
	op := OpRenew
	if manual {
		op = opExtend
	}
	ReportNodes(l.obs, l.Name, op, nodeErrs)
	l.obs.Renewed(RenewNote{Hold: l, Name: l.Name, Manual: manual, TTL: ttl, Start: start, Duration: time.Since(start), Err: err})
}

// acquireTrace follows one acquire call for the observer; nil (and every
// method a no-op) when there is none, so an unobserved call pays nothing.
type acquireTrace struct {
	obs       Reporter
	ctx       context.Context
	name      string
	wait      bool
	start     time.Time
	refused   time.Time // end of the first attempt that did not get the lock
	attempts  int
	contended bool
}

func NewAcquireTrace(ctx context.Context, cfg *Config, name string, wait bool) *acquireTrace {
	if cfg.Observer == nil {
		return nil
	}
	return &acquireTrace{obs: cfg.Observer, ctx: ctx, name: name, wait: wait, start: time.Now()}
}

// Attempted records one acquire round trip and its error.
func (tr *acquireTrace) Attempted(err error) {
	if tr == nil {
		return
	}
	tr.attempts++
	if err != nil {
		if tr.refused.IsZero() {
			tr.refused = time.Now()
		}
		tr.contended = tr.contended || isTaken(err)
	}
}

// Done reports the call's end.
func (tr *acquireTrace) Done(l *Hold, err error) {
	if tr == nil {
		return
	}
	end := time.Now()
	ev := AcquireNote{
		Ctx: tr.ctx, Name: tr.name, Wait: tr.wait, Start: tr.start, Duration: end.Sub(tr.start),
		Attempts: tr.attempts, Contended: tr.contended, Hold: l, Err: err,
	}
	if tr.wait && !tr.refused.IsZero() {
		ev.WaitTime = end.Sub(tr.refused)
	}
	switch {
	case err == nil:
		ev.Outcome = OutcomeAcquired
	case ctxEnded(tr.ctx) != nil:
		// The caller's ctx ended. A node call's own deadline (a NodeError
		// wrapping DeadlineExceeded) is a failure, not a cancellation.
		ev.Outcome = OutcomeCanceled
	case isTaken(err):
		ev.Outcome, ev.Contended = OutcomeContended, true
	default:
		ev.Outcome = OutcomeFailed
	}
	tr.obs.Acquired(ev)
}
