package engine

import "time"

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
