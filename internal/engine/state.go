package engine

import (
	"fmt"
	"time"
)

// status is where a Lock is in its life (held, released, lost, and why):
// data with transitions, guarded by the Lock's mu. Only transition and
// loseLocked change it.
type status struct {
	state lockState
	why   string
	// With stateLost: why, and what was last heard. The LostError is built
	// on first use (lossErr), not in the loss clock's loop that closes Done
	// channels, where every nanosecond per lock counts.
	lossReason LossReason
	lossCause  error
	lossErr    error
	done       chan struct{} // made by Done on first use; closed when the lock ends
	Ended      time.Time     // when Done closed
}

type lockState int

// doneChan is a new Done channel for a lock in state s: closed unless the
// lock is held (or being acquired).
func doneChan(s lockState) chan struct{} {
	ch := make(chan struct{})
	if s != stateHeld && s != stateAcquiring {
		close(ch)
	}
	return ch
}

// errLocked is Lock.Err's answer for a lock named name, from its status.
func (st *status) errLocked(name string) error {
	switch st.state {
	case stateHeld, stateAcquiring:
		return nil
	case stateLost:
		if st.lossReason != 0 {
			if st.lossErr == nil {
				st.lossErr = Say.LostError(name, st.lossReason, st.lossCause)
			}
			return st.lossErr
		}
		return fmt.Errorf("%w: %s", Say.ErrLost, st.why)
	}
	if st.why == whyClosed {
		return Say.LostError(name, LossClosed, nil)
	}
	return Say.ErrReleased
}

// loseLocked is lose's transition (the Lock's mu held); the engine's ended must follow
// when it returns true.
func (st *status) loseLocked(reason LossReason, err error) bool {
	if !st.transition(stateLost, reason.String()) {
		return false
	}
	st.lossReason, st.lossCause = reason, err
	return true
}

// transition changes the state under the Lock's mu and closes Done; the engine's
// ended must follow outside it when it returns true.
func (st *status) transition(to lockState, why string) bool {
	if st.state != stateHeld && st.state != stateAcquiring {
		return false
	}
	st.state = to
	st.why = why
	st.Ended = time.Now()
	if st.done != nil {
		close(st.done)
	}
	return true
}
