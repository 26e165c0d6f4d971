package redlock

import "time"

// Operations named in NodeErrorEvent.Op.
const (
	opAcquire = "acquire"
	opRenew   = "renew"
	opExtend  = "extend"
	opRelease = "release"
)

// noteEnd tells the observer and the log that l stopped being held for to,
// with cause.
func noteEnd(l *hold, to lockState, cause error) {
	if l.obs != nil && to != stateFailed {
		if say.isLost(cause) {
			l.obs.lost(lossNote{Hold: l, Name: l.name, Held: heldFor(l), Err: cause})
		}
	}
	if to == stateLost {
		l.logger.Warn("redlock: lock lost", "name", l.name, "token", l.token, "reason", l.why)
	}
}

// observeRenew reports one renewal or Extend of l, whose outcome is err
// and whose failing nodes are in nodeErrs.
func observeRenew(l *hold, manual bool, ttl time.Duration, start time.Time, err, nodeErrs error) {
	op := opRenew
	if manual {
		op = opExtend
	}
	reportNodes(l.obs, l.name, op, nodeErrs)
	l.obs.renewed(renewNote{Hold: l, Name: l.name, Manual: manual, TTL: ttl, Start: start, Duration: time.Since(start), Err: err})
}
