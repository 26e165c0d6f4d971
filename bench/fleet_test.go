package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
)

// BenchmarkFleetTracking measures what loss tracking costs a fleet (issue
// "scale"): instances x locks auto-renewed locks (TTL 1.5 s, so about two
// renewals a second each) held on one server, with tracking on (the
// default) and off, in interleaved rounds. Every instance is a Locker on a
// client of its own, all in this process: "fleet CPU" is the process's CPU
// time. For each mode it reports, per 4 s window, the server's CPU time,
// the fleet's CPU time and the bytes the server sent, and the ratios of on
// to off. Run by hand:
//
//	go test -run '^$' -bench 'FleetTracking' -benchtime 1x .
func BenchmarkFleetTracking(b *testing.B) {
	for _, shape := range []struct{ instances, locks int }{{8, 600}, {32, 150}} {
		b.Run(fmt.Sprintf("instances=%d/locks=%d", shape.instances, shape.locks), func(b *testing.B) {
			srv := getServers(b, fmt.Sprintf("fleet-%d", shape.instances), 1)[0]
			const rounds, window = 5, 4 * time.Second
			var on, off []fleetCost
			for range b.N {
				for r := range rounds {
					for _, tracking := range []bool{r%2 == 0, r%2 != 0} {
						c := runFleet(b, srv, shape.instances, shape.locks, tracking, window)
						if tracking {
							on = append(on, c)
						} else {
							off = append(off, c)
						}
					}
				}
			}
			mOn, mOff := medianCost(on), medianCost(off)
			b.ReportMetric(mOn.server.Seconds()*1000, "server-ms-on")
			b.ReportMetric(mOff.server.Seconds()*1000, "server-ms-off")
			b.ReportMetric(mOn.fleet.Seconds()*1000, "fleet-ms-on")
			b.ReportMetric(mOff.fleet.Seconds()*1000, "fleet-ms-off")
			b.ReportMetric(float64(mOn.out)/1e6, "out-MB-on")
			b.ReportMetric(float64(mOff.out)/1e6, "out-MB-off")
			b.ReportMetric(ratio(mOn.server, mOff.server), "server-x")
			b.ReportMetric(ratio(mOn.fleet, mOff.fleet), "fleet-x")
			// The same ratios per round (its on and off windows run one
			// after the other, on a machine in the same state), median.
			b.ReportMetric(pairedRatio(on, off, func(c fleetCost) time.Duration { return c.server }), "server-x-paired")
			b.ReportMetric(pairedRatio(on, off, func(c fleetCost) time.Duration { return c.fleet }), "fleet-x-paired")
			b.ReportMetric(float64(mOn.out)/float64(max(mOff.out, 1)), "out-x")
			b.ReportMetric(float64(mOn.lost+mOff.lost), "lost")
			b.ReportMetric(float64(mOn.scriptNs)/1000, "script-us-on")
			b.ReportMetric(float64(mOff.scriptNs)/1000, "script-us-off")
			b.ReportMetric(float64(mOn.cmdsPerScript)/1000, "cmds/script-on")
			b.ReportMetric(float64(mOff.cmdsPerScript)/1000, "cmds/script-off")
		})
	}
}

// fleetCost is what one window of one mode cost.
type fleetCost struct {
	server, fleet time.Duration
	out           int64
	lost          int
	// Per EVALSHA (nearly all of them renewals): the server's time in it,
	// ns, and the commands the server ran, in thousandths (INFO
	// commandstats; commands run by scripts count, INFO and PING do not).
	scriptNs, cmdsPerScript int64
}

// runFleet starts instances Lockers holding locks auto-renewed locks each,
// lets the tracking connections open and the renewals settle, then
// measures one window, and closes everything.
func runFleet(b *testing.B, srv *server, instances, locks int, tracking bool, window time.Duration) fleetCost {
	b.Helper()
	ctx := context.Background()
	var lks []*redlock.Locker
	var held []*redlock.Lock
	for i := range instances {
		cl := redis.NewClient(goRedisOptions(srv.Addr()))
		lk, err := redlock.NewLocker(cl, redlock.WithTTL(1500*time.Millisecond), redlock.WithLossTracking(tracking))
		if err != nil {
			b.Fatal(err)
		}
		lks = append(lks, lk)
		for j := range locks {
			l, err := lk.TryLock(ctx, fmt.Sprintf("fleet-%v-%d-%d", tracking, i, j))
			if err != nil {
				b.Fatal(err)
			}
			held = append(held, l)
		}
	}
	time.Sleep(2 * time.Second) // tracking opens at 50 ms of hold; renewals spread out
	// The garbage of the window before (the other mode's, last round) is
	// collected now, not in this window's fleet CPU.
	runtime.GC()
	cpu0, out0, fleet0 := serverCPU(b, []*server{srv}), serverOutput(b, srv), processCPU(b)
	st0 := commandStats(b, []*server{srv})
	time.Sleep(window)
	st1 := commandStats(b, []*server{srv})
	c := fleetCost{server: serverCPU(b, []*server{srv}) - cpu0, out: serverOutput(b, srv) - out0, fleet: processCPU(b) - fleet0}
	if calls := st1["evalsha"].calls - st0["evalsha"].calls; calls > 0 {
		c.scriptNs = (st1["evalsha"].usec - st0["evalsha"].usec) * 1000 / calls
		c.cmdsPerScript = (serverCommands(callsOf(st1)) - serverCommands(callsOf(st0))) * 1000 / calls
	}
	for _, l := range held {
		if l.Err() != nil {
			c.lost++
		}
	}
	for _, lk := range lks {
		_ = lk.Close()
	}
	return c
}

// serverOutput is INFO stats' total_net_output_bytes.
func serverOutput(b *testing.B, srv *server) int64 {
	b.Helper()
	for l := range strings.Lines(srv.Info(b, "stats")) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "total_net_output_bytes:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("INFO stats has no total_net_output_bytes")
	return 0
}

// processCPU is this process's CPU time so far (user + system).
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func medianCost(cs []fleetCost) fleetCost {
	med := func(get func(fleetCost) int64) int64 {
		v := make([]int64, len(cs))
		for i, c := range cs {
			v[i] = get(c)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	lost := 0
	for _, c := range cs {
		lost += c.lost
	}
	return fleetCost{
		server: time.Duration(med(func(c fleetCost) int64 { return int64(c.server) })),
		fleet:  time.Duration(med(func(c fleetCost) int64 { return int64(c.fleet) })),
		out:    med(func(c fleetCost) int64 { return c.out }),
		lost:   lost,

		scriptNs:      med(func(c fleetCost) int64 { return c.scriptNs }),
		cmdsPerScript: med(func(c fleetCost) int64 { return c.cmdsPerScript }),
	}
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(max(b, 1)) }

// pairedRatio is the median over rounds of on[i]/off[i] for the figure get.
func pairedRatio(on, off []fleetCost, get func(fleetCost) time.Duration) float64 {
	var rs []float64
	for i := range min(len(on), len(off)) {
		rs = append(rs, ratio(get(on[i]), get(off[i])))
	}
	if len(rs) == 0 {
		return 0
	}
	slices.Sort(rs)
	return rs[len(rs)/2]
}
