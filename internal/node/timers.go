package node

import (
	"sync"
	"time"
)

// timers recycles the timers of gather and of the waits between retries:
// most rounds end by a reply, not by the deadline, and a timer that never
// fired can be reset and used again.
var timers sync.Pool

func GetTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// PutTimer stops t and keeps it only when it had not fired: then nothing was
// or will be sent on t.C, so a later user cannot receive a stale tick even
// under the pre-Go 1.23 timer semantics (GODEBUG=asynctimerchan=1).
func PutTimer(t *time.Timer) {
	if t.Stop() {
		timers.Put(t)
	}
}
