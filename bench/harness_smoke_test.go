package bench

import (
	"sync/atomic"
	"testing"
)

// TestContendedHarness runs a short contended run of every library and checks
// the harness itself: no two critical sections overlap, every unlock works,
// and the gap bookkeeping covers every handoff. Not run in CI.
func TestContendedHarness(t *testing.T) {
	srvs := getServers(t, "single", 1)
	for _, l := range contendedLibs {
		t.Run(l.name, func(t *testing.T) {
			var cmds atomic.Int64
			ws := newWorkers(t, l, srvs[0].Addr(), 4, &cmds)
			c := contend(t, ws, lockName("harness-"+l.name), 40, holdTime, outsideTime)
			if c.overlaps != 0 || c.unlockErrs != 0 {
				t.Fatalf("overlaps=%d unlockErrs=%d", c.overlaps, c.unlockErrs)
			}
			if len(c.gaps) != 39 || c.busy <= 0 || c.busy > c.span {
				t.Fatalf("gaps=%d busy=%v span=%v", len(c.gaps), c.busy, c.span)
			}
			t.Logf("%s: gap p50 %v, wait p99 %v, busy %.0f%%, %d cmds, %d lock errors",
				l.name, median(c.gaps), percentile(c.waits, 99), 100*float64(c.busy)/float64(c.span), cmds.Load(), c.lockErrs)
		})
	}
}
