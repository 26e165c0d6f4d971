package bench

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// Settings shared by every library so that the comparison is like for like.
const (
	lockTTL   = 10 * time.Second // our default; redsync, redislock and rueidislock are set to it
	pingCount = 200              // PINGs per round-trip measurement
)

// goRedisOptions are the go-redis client settings every go-redis based
// library gets (ours, redsync, redislock): the library defaults, one address.
func goRedisOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr}
}

// countHook counts every command a go-redis client sends, pipelined ones
// included, into n.
type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// newGoRedis returns a go-redis client for addr that counts its commands
// into n (when n is not nil), closed when tb ends.
func newGoRedis(tb testing.TB, addr string, n *atomic.Int64) *redis.Client {
	tb.Helper()
	return goRedisClient(tb, goRedisOptions(addr), n)
}

// newCtxDLGoRedis is newGoRedis with ContextTimeoutEnabled: our library then
// calls it inline, without a goroutine per call (the fast path).
func newCtxDLGoRedis(tb testing.TB, addr string, n *atomic.Int64) *redis.Client {
	tb.Helper()
	opt := goRedisOptions(addr)
	opt.ContextTimeoutEnabled = true
	return goRedisClient(tb, opt, n)
}

func goRedisClient(tb testing.TB, opt *redis.Options, n *atomic.Int64) *redis.Client {
	c := redis.NewClient(opt)
	if n != nil {
		c.AddHook(countHook{n})
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// countingRueidis wraps a rueidis client and counts the commands sent
// through Do and DoMulti, which is every command rueidislock sends.
type countingRueidis struct {
	rueidis.Client
	n *atomic.Int64
}

func (c countingRueidis) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c countingRueidis) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(int64(len(multi)))
	return c.Client.DoMulti(ctx, multi...)
}

// pinger measures the PING round trip on its own go-redis client with the
// shared settings: the floor any lock operation pays.
type pinger struct {
	c       *redis.Client
	samples []time.Duration
}

func newPinger(tb testing.TB, addr string) *pinger {
	tb.Helper()
	p := &pinger{c: newGoRedis(tb, addr, nil)}
	for range 20 { // connect and warm up
		if err := p.c.Ping(context.Background()).Err(); err != nil {
			tb.Fatalf("PING %s: %v", addr, err)
		}
	}
	return p
}

// sample times pingCount PINGs, one after another.
func (p *pinger) sample(tb testing.TB) {
	tb.Helper()
	for range pingCount {
		t := time.Now()
		if err := p.c.Ping(context.Background()).Err(); err != nil {
			tb.Fatalf("PING: %v", err)
		}
		p.samples = append(p.samples, time.Since(t))
	}
}

func (p *pinger) median() time.Duration { return median(p.samples) }

func median(d []time.Duration) time.Duration { return percentile(d, 50) }

// percentile returns the p-th percentile (nearest rank) of d; d is sorted.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(float64(len(d)-1) * p / 100)
	return d[i]
}

// cmdStat is one command's INFO commandstats: its calls and their time (µs).
type cmdStat struct{ calls, usec int64 }

// commandStats sums, over the servers, INFO commandstats per command (lower
// case: "evalsha", "subscribe").
func commandStats(tb testing.TB, srvs []*server) map[string]cmdStat {
	tb.Helper()
	stats := map[string]cmdStat{}
	for _, s := range srvs {
		for l := range strings.Lines(s.Info(tb, "commandstats")) {
			// cmdstat_evalsha:calls=12,usec=34,usec_per_call=2.83,...
			name, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
			name, isCmd := strings.CutPrefix(name, "cmdstat_")
			if !ok || !isCmd {
				continue
			}
			st := stats[name]
			for f := range strings.SplitSeq(rest, ",") {
				k, v, _ := strings.Cut(f, "=")
				if k != "calls" && k != "usec" {
					continue
				}
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					tb.Fatalf("INFO commandstats %s: %v", l, err)
				}
				if k == "calls" {
					st.calls += n
				} else {
					st.usec += n
				}
			}
			stats[name] = st
		}
	}
	return stats
}

// serverCalls is commandStats' calls per command. Commands that scripts
// run inside Redis count there too (GET, SET, PUBLISH of a release script),
// but scripts and pub/sub (un)subscriptions never run inside a script, so
// their counts are top-level calls: what a client sent, pub/sub connections
// included, which the client hooks do not see.
func serverCalls(tb testing.TB, srvs []*server) map[string]int64 {
	tb.Helper()
	return callsOf(commandStats(tb, srvs))
}

func callsOf(stats map[string]cmdStat) map[string]int64 {
	calls := make(map[string]int64, len(stats))
	for name, st := range stats {
		calls[name] = st.calls
	}
	return calls
}

// Commands counted together by the meter from INFO commandstats.
var (
	scriptCmds = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}
	subCmds    = []string{"subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ssubscribe", "sunsubscribe"}
)

// serverCommands is every command the servers ran, those that scripts call
// included (Redis counts them in commandstats too), except the harness's
// own INFO and PING.
func serverCommands(m map[string]int64) (n int64) {
	for c, v := range m {
		if c != "info" && c != "ping" {
			n += v
		}
	}
	return n
}

func sumCalls(m map[string]int64, names []string) (n int64) {
	for _, c := range names {
		n += m[c]
	}
	return n
}

// serverCPU is the CPU time (user + system) the servers have used so far.
func serverCPU(tb testing.TB, srvs []*server) time.Duration {
	tb.Helper()
	var total time.Duration
	for _, s := range srvs {
		for l := range strings.Lines(s.Info(tb, "cpu")) {
			k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
			if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					tb.Fatalf("INFO cpu %s=%q: %v", k, v, err)
				}
				total += time.Duration(f * float64(time.Second))
			}
		}
	}
	return total
}

// meter measures one timed section of a benchmark: wall time, commands sent
// (as counted by the client hooks) and server CPU, and reports them per op
// next to the PING round trip measured in the same run.
type meter struct {
	b    *testing.B
	cmds *atomic.Int64
	srvs []*server
	ping *pinger
	cpu0 time.Duration
	// calls0: INFO commandstats calls when the timed section started.
	calls0 map[string]int64
	t0     time.Time
}

// startMeter samples the PING round trip, resets the counters and the
// benchmark timer. Call it right before the timed loop; cmds may be nil when
// nothing is counted. The round trip is sampled again after the loop and
// reported as the median of both samples.
func startMeter(b *testing.B, cmds *atomic.Int64, srvs []*server) *meter {
	b.Helper()
	m := &meter{b: b, cmds: cmds, srvs: srvs, ping: newPinger(b, srvs[0].Addr())}
	m.ping.sample(b)
	if cmds != nil {
		cmds.Store(0)
	}
	m.cpu0 = serverCPU(b, srvs)
	m.calls0 = serverCalls(b, srvs)
	b.ResetTimer()
	m.t0 = time.Now()
	return m
}

// stop stops the timer and reports the per-op metrics for ops operations
// (critical sections), unit names ending in unit ("op" or "cs"). It returns
// the median PING round trip of the run (0 when ops is 0).
//
// cmds/<unit> is what the client hooks counted; scripts/<unit> and
// subs/<unit> come from the servers' INFO commandstats: script calls
// (EVAL, EVALSHA, FCALL and their _RO forms) and pub/sub (un)subscriptions
// (SUBSCRIBE, UNSUBSCRIBE and the P/S forms), summed over the servers.
func (m *meter) stop(ops int, unit string) time.Duration {
	elapsed := time.Since(m.t0)
	m.b.StopTimer()
	if ops == 0 {
		return 0
	}
	cpu := serverCPU(m.b, m.srvs) - m.cpu0
	calls := serverCalls(m.b, m.srvs)
	m.ping.sample(m.b)
	ping := m.ping.median()
	n := float64(ops)
	if m.cmds != nil {
		m.b.ReportMetric(float64(m.cmds.Load())/n, "cmds/"+unit)
	}
	m.b.ReportMetric(float64(sumCalls(calls, scriptCmds)-sumCalls(m.calls0, scriptCmds))/n, "scripts/"+unit)
	m.b.ReportMetric(float64(sumCalls(calls, subCmds)-sumCalls(m.calls0, subCmds))/n, "subs/"+unit)
	m.b.ReportMetric(float64(serverCommands(calls)-serverCommands(m.calls0))/n, "srv-cmds/"+unit)
	if os.Getenv("BENCH_COMMANDS") != "" {
		m.logCommands(calls, n, unit)
	}
	m.b.ReportMetric(float64(cpu.Microseconds())/n, "srv-cpu-us/"+unit)
	m.b.ReportMetric(float64(ping.Nanoseconds())/1e3, "ping-us")
	m.b.ReportMetric(float64(elapsed.Nanoseconds())/n/float64(ping.Nanoseconds()), "pings/"+unit)
	return ping
}

// addrs lists the servers' addresses.
func addrs(srvs []*server) []string {
	out := make([]string, len(srvs))
	for i, s := range srvs {
		out[i] = s.Addr()
	}
	return out
}

// loopbackOnly fails tb unless every address is on 127.0.0.0/8.
func loopbackOnly(tb testing.TB, as ...string) {
	tb.Helper()
	for _, a := range as {
		h, _, err := net.SplitHostPort(a)
		if err != nil || !net.ParseIP(h).IsLoopback() {
			tb.Fatalf("refusing non-loopback address %q", a)
		}
	}
}

// logCommands logs each server command's calls per op, most first, when
// BENCH_COMMANDS is set: where a row's srv-cmds go.
func (m *meter) logCommands(calls map[string]int64, n float64, unit string) {
	names := make([]string, 0, len(calls))
	for c, v := range calls {
		if v > m.calls0[c] && c != "info" && c != "ping" {
			names = append(names, c)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Compare(calls[b]-m.calls0[b], calls[a]-m.calls0[a])
	})
	var sb strings.Builder
	for _, c := range names {
		fmt.Fprintf(&sb, " %s=%.2f", c, float64(calls[c]-m.calls0[c])/n)
	}
	m.b.Logf("server commands per %s:%s", unit, sb.String())
}
