package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestOwnReleaseWakesPastAStaleHolder: a release by a holder of this core
// wakes the head of the name's queue even when the last refused attempt
// named another holder (a holder of ours that has released since, the name
// having passed on in process). A release message of another owner still
// wakes nobody while that holder holds a quorum (a Redlock's failed attempt
// withdrawing its grants).
func TestOwnReleaseWakesPastAStaleHolder(t *testing.T) {
	const ch = "{n}:rel"
	for _, tc := range []struct {
		name  string
		own   bool
		woken bool
	}{
		{"release message of another owner", false, false},
		{"release by a holder of ours", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := newWaiters(&heldNames{n: map[string]int{}})
			w := &waiter{wake: make(chan struct{}, 1)}
			ws.Queues[ch] = &waitQueue{List: []*waiter{w}}
			ws.firm[ch] = "first-holder"
			ws.dispatch(ch, "second-holder", tc.own)
			assert.Equal(t, tc.woken, len(w.wake) == 1, "head woken")
			_, stale := ws.firm[ch]
			assert.Equal(t, !tc.own, stale, "the refused attempt's holder still on record")
		})
	}
}
