package bench

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// ---------------------------------------------------------------------------
// Fairness: G workers on one name, hold 1 ms, no work outside, in two
// set-ups measured in the same run: G Lockers each with a client of its own
// (G processes), and G goroutines sharing one Locker (one process). The
// first is what the server-side queue of waiting writers is for: a release
// wakes one waiter, and the name goes to the longest-waiting process.

const fairHold = time.Millisecond

func BenchmarkFairness(b *testing.B) {
	srvs := getServers(b, "single", 1)
	loopbackOnly(b, srvs[0].Addr())
	const g = 8
	for _, l := range []lib{
		{name: "redlock-lockers", newWorker: newRedlockWorker},
		{name: "redlock-goroutines", newWorker: newRedlockWorker, shared: true},
	} {
		b.Run(l.name, func(b *testing.B) {
			var cmds atomic.Int64
			ws := newWorkers(b, l, srvs[0].Addr(), g, &cmds)
			m := startMeter(b, &cmds, srvs)
			t0 := time.Now()
			res := contend(b, ws, lockName("fair-"+l.name), b.N, fairHold, 0)
			elapsed := time.Since(t0)
			m.stop(b.N, "cs")
			res.reportFairness(b, g, elapsed)
		})
	}
}

// ---------------------------------------------------------------------------
// Hold ~0: G workers, each with its own client (G processes), take one name
// and release it at once, no work outside. Throughput is then bounded by
// the hand-off itself: how many round trips and server commands pass the
// name from one holder to the next.

func BenchmarkContendedHold0(b *testing.B) {
	srvs := getServers(b, "single", 1)
	loopbackOnly(b, srvs[0].Addr())
	const g = 8
	for _, l := range contendedLibs {
		b.Run(fmt.Sprintf("%s/g=%d", l.name, g), func(b *testing.B) {
			var cmds atomic.Int64
			ws := newWorkers(b, l, srvs[0].Addr(), g, &cmds)
			m := startMeter(b, &cmds, srvs)
			t0 := time.Now()
			res := contend(b, ws, lockName("hold0-"+l.name), b.N, 0, 0)
			elapsed := time.Since(t0)
			m.stop(b.N, "cs")
			res.reportFairness(b, g, elapsed)
		})
	}
}

// reportFairness reports throughput and how evenly g workers shared the
// name: the least successful worker's sections as a percentage of a fair
// share (n/g), and the longest wait for the lock as a multiple of the mean.
func (c *contention) reportFairness(b *testing.B, g int, elapsed time.Duration) {
	if c.overlaps > 0 {
		b.Errorf("%d critical sections overlapped another holder", c.overlaps)
	}
	if c.unlockErrs > 0 {
		b.Errorf("%d unlocks failed", c.unlockErrs)
	}
	b.ReportMetric(float64(c.n)/elapsed.Seconds(), "cs/s")
	b.ReportMetric(100*float64(c.minWins)*float64(g)/float64(c.n), "min-share-pct")
	var sum, most time.Duration
	for _, w := range c.waits {
		sum += w
		most = max(most, w)
	}
	if sum > 0 {
		b.ReportMetric(float64(most)/(float64(sum)/float64(len(c.waits))), "wait-max/mean")
	}
}
