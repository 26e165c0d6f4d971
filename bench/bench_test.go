package bench

import (
	"context"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	goredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redlockgo/redlock"
)

// runID makes lock names unique per benchmark invocation, so that no key
// left by an earlier invocation (a rueidislock key still being released,
// say) can meet a later one.
var runID atomic.Int64

// lockName returns a fresh name for the row label names. The label goes
// in as a checksum, so that every row's names have one length: the server
// hashes a key's name at each lookup, and with the label written out the
// rows with longer labels paid for them (ours had the longest: up to 5% of a
// pair's server instructions, BENCHMARKS.md "Eighth round").
func lockName(label string) string {
	return fmt.Sprintf("bench:%08x:%07d", crc32.ChecksumIEEE([]byte(label)), runID.Add(1))
}

// warmups is how many acquire/release pairs run before timing: connections
// are dialled and scripts loaded (NOSCRIPT fallbacks) outside the timer.
const warmups = 20

// ---------------------------------------------------------------------------
// 1. Uncontended: acquire + release of a free lock, one goroutine.

func BenchmarkUncontended(b *testing.B) {
	srvs := getServers(b, "single", 1)
	addr := srvs[0].Addr()
	loopbackOnly(b, addr)
	b.Run("redlock", func(b *testing.B) { benchRedlock(b, srvs) })
	b.Run("redlock-norenew", func(b *testing.B) { benchRedlock(b, srvs, redlock.WithAutoRenew(false)) })
	b.Run("redlock-norenew-nofence", func(b *testing.B) {
		benchRedlock(b, srvs, redlock.WithAutoRenew(false), redlock.WithFencing(false))
	})
	b.Run("redsync", func(b *testing.B) { benchRedsync(b, srvs) })
	// Our scripts from go-redis without the library: the allocations and
	// server commands that are go-redis's and the scripts' own.
	b.Run("bare-scripts", func(b *testing.B) {
		var cmds atomic.Int64
		scripts := loadBareScripts(b)
		c := newGoRedis(b, addr, &cmds)
		ctx := context.Background()
		name := lockName("uncontended-bare-scripts")
		once := func() {
			if err := scripts.pair(ctx, c, name, false); err != nil {
				b.Fatal(err)
			}
		}
		timePairs(b, &cmds, srvs, once)
	})
	b.Run("raw-setnx-del", func(b *testing.B) {
		var cmds atomic.Int64
		c := newGoRedis(b, addr, &cmds)
		ctx := context.Background()
		name := lockName("uncontended-raw")
		once := func() {
			if ok, err := c.SetNX(ctx, name, "v", lockTTL).Result(); err != nil || !ok {
				b.Fatalf("SET NX = %v, %v", ok, err)
			}
			if err := c.Del(ctx, name).Err(); err != nil {
				b.Fatal(err)
			}
		}
		timePairs(b, &cmds, srvs, once)
	})
	b.Run("redislock", func(b *testing.B) {
		var cmds atomic.Int64
		c := redislock.New(newGoRedis(b, addr, &cmds))
		ctx := context.Background()
		name := lockName("uncontended-redislock")
		once := func() {
			l, err := c.Obtain(ctx, name, lockTTL, redislockOpts)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
		timePairs(b, &cmds, srvs, once)
	})
	b.Run("rueidislock", func(b *testing.B) {
		var cmds atomic.Int64
		lk := newRueidisLocker(b, addr, &cmds)
		defer lk.Close()
		ctx := context.Background()
		name := lockName("uncontended-rueidislock")
		once := func() {
			_, cancel, err := lk.WithContext(ctx, name)
			if err != nil {
				b.Fatal(err)
			}
			cancel()
		}
		timePairs(b, &cmds, srvs, once)
	})
}

// timePairs runs once (one acquire + release) warmups times untimed, then
// b.N times under the meter, reporting allocations and the per-op metrics.
func timePairs(b *testing.B, cmds *atomic.Int64, srvs []*server, once func()) {
	for range warmups {
		once()
	}
	b.ReportAllocs()
	m := startMeter(b, cmds, srvs)
	for i := 0; i < b.N; i++ {
		once()
	}
	m.stop(b.N, "op")
}

// benchRedlock times Lock + Unlock of a free lock with our Locker (one
// server) or Redlock (several), opts given to the constructor.
func benchRedlock(b *testing.B, srvs []*server, opts ...redlock.Option) {
	var cmds atomic.Int64
	var clients []redlock.Client
	for _, s := range srvs {
		clients = append(clients, newGoRedis(b, s.Addr(), &cmds))
	}
	var (
		lock  func(context.Context, string, ...redlock.Option) (*redlock.Lock, error)
		close func() error
	)
	if len(clients) == 1 {
		lk, err := redlock.NewLocker(clients[0], opts...)
		if err != nil {
			b.Fatal(err)
		}
		lock, close = lk.Lock, lk.Close
	} else {
		rl, err := redlock.NewRedlock(clients, opts...)
		if err != nil {
			b.Fatal(err)
		}
		lock, close = rl.Lock, rl.Close
	}
	defer close()
	ctx := context.Background()
	name := lockName(fmt.Sprintf("redlock%d", len(srvs)))
	once := func() {
		l, err := lock(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	timePairs(b, &cmds, srvs, once)
}

// benchRedsync times LockContext + UnlockContext of a free mutex over one
// pool per server, a new Mutex per acquisition as redsync is used.
func benchRedsync(b *testing.B, srvs []*server, opts ...redsync.Option) {
	var cmds atomic.Int64
	var pools []rsredis.Pool
	for _, s := range srvs {
		pools = append(pools, goredis.NewPool(newGoRedis(b, s.Addr(), &cmds)))
	}
	rs := redsync.New(pools...)
	ctx := context.Background()
	name := lockName(fmt.Sprintf("redsync%d", len(srvs)))
	once := func() {
		mu := rs.NewMutex(name, append([]redsync.Option{redsync.WithExpiry(lockTTL)}, opts...)...)
		if err := mu.LockContext(ctx); err != nil {
			b.Fatal(err)
		}
		if ok, err := mu.UnlockContext(ctx); err != nil || !ok {
			b.Fatalf("redsync unlock = %v, %v", ok, err)
		}
	}
	timePairs(b, &cmds, srvs, once)
}

// ---------------------------------------------------------------------------
// 2. Redlock over 5 independent servers: acquire + release of a free lock.

func BenchmarkRedlock5(b *testing.B) {
	srvs := getServers(b, "five", 5)
	loopbackOnly(b, addrs(srvs)...)
	b.Run("redlock", func(b *testing.B) { benchRedlock(b, srvs) })
	b.Run("redlock-norenew", func(b *testing.B) { benchRedlock(b, srvs, redlock.WithAutoRenew(false)) })
	b.Run("redlock-norenew-nofence", func(b *testing.B) {
		benchRedlock(b, srvs, redlock.WithAutoRenew(false), redlock.WithFencing(false))
	})
	// Our scripts alone, sent as a Redlock sends them: the server's share.
	b.Run("bare-scripts-redlock", func(b *testing.B) {
		pair := bareRedlockPair(b, srvs)
		timePairs(b, nil, srvs, func() {
			if err := pair(); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("redsync", func(b *testing.B) { benchRedsync(b, srvs) })
	// Returns at a quorum instead of waiting for every server, as ours does.
	b.Run("redsync-failfast", func(b *testing.B) { benchRedsync(b, srvs, redsync.WithFailFast(true)) })
}

// ---------------------------------------------------------------------------
// 3. Contended: G workers, each with its own client, loop
// Lock -> hold -> Unlock -> work outside, until b.N critical sections ran.

const (
	holdTime    = 2 * time.Millisecond // work inside the lock
	outsideTime = 1 * time.Millisecond // work between two acquisitions
	runBound    = 3 * time.Minute      // hard bound on one contended run
)

var contenders = []int{2, 16}

func BenchmarkContended(b *testing.B) {
	srvs := getServers(b, "single", 1)
	loopbackOnly(b, srvs[0].Addr())
	for _, l := range contendedLibs {
		b.Run(l.name, func(b *testing.B) {
			for _, g := range contenders {
				b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
					var cmds atomic.Int64
					ws := newWorkers(b, l, srvs[0].Addr(), g, &cmds)
					m := startMeter(b, &cmds, srvs)
					res := contend(b, ws, lockName("contended-"+l.name), b.N, holdTime, outsideTime)
					ping := m.stop(b.N, "cs")
					res.report(b, ping)
				})
			}
		})
	}
}

// newWorkers makes g workers of l and warms each up with a few uncontended
// acquisitions (connections, script cache), outside any measurement.
func newWorkers(tb testing.TB, l lib, addr string, g int, cmds *atomic.Int64) []worker {
	tb.Helper()
	ws := make([]worker, g)
	for i := range ws {
		if l.shared && i > 0 {
			ws[i] = ws[0]
			continue
		}
		ws[i] = l.newWorker(tb, addr, cmds)
		tb.Cleanup(ws[i].close)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := lockName("warmup-" + l.name)
	warm := ws
	if l.shared {
		warm = ws[:1]
	}
	for _, w := range warm {
		for range 3 {
			unlock, err := w.lock(ctx, name)
			if err != nil {
				tb.Fatalf("%s warm-up lock: %v", l.name, err)
			}
			if err := unlock(); err != nil {
				tb.Fatalf("%s warm-up unlock: %v", l.name, err)
			}
		}
	}
	return ws
}

// contention is what one contended run observed.
type contention struct {
	n          int
	gaps       []time.Duration // acquire[k] - release[k-1]: the lock free between two holders
	waits      []time.Duration // Lock call to Lock return, per critical section
	busy       time.Duration   // sum of acquire[k] -> release[k] (Unlock returned)
	span       time.Duration   // acquire[0] -> release[n-1]
	lockErrs   int64           // Lock calls that gave up (redsync after 32 tries); retried
	unlockErrs int64
	overlaps   int64 // critical sections that found another holder inside: must be 0
	maxWins    int   // critical sections of the most successful worker (fair: n/G)
	minWins    int   // critical sections of the least successful worker
}

// contend runs n critical sections over the workers, each worker looping
// Lock, hold, Unlock, outside work, until n critical sections have started.
// The order of critical sections is the order of a counter incremented
// while holding the lock, so k-1 is always the previous holder of k.
func contend(tb testing.TB, ws []worker, name string, n int, hold, outside time.Duration) *contention {
	tb.Helper()
	acq := make([]time.Time, n)
	rel := make([]time.Time, n)
	waits := make([]time.Duration, n)
	var seq, lockErrs, unlockErrs, overlaps atomic.Int64
	var inside atomic.Int32

	bound, cancelBound := context.WithTimeout(context.Background(), runBound)
	defer cancelBound()
	ctx, finish := context.WithCancel(bound) // cancelled after the last critical section: waiters leave
	defer finish()

	start := make(chan struct{})
	var wg sync.WaitGroup
	wins := make([]int, len(ws)) // critical sections per worker
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for seq.Load() < int64(n) && ctx.Err() == nil {
				t0 := time.Now()
				unlock, err := w.lock(ctx, name)
				if err != nil {
					if ctx.Err() == nil {
						lockErrs.Add(1)
					}
					continue
				}
				ta := time.Now()
				k := seq.Add(1) - 1
				if k >= int64(n) {
					_ = unlock()
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				acq[k], waits[k] = ta, ta.Sub(t0)
				wins[i]++
				if hold > 0 {
					time.Sleep(hold)
				}
				inside.Add(-1)
				if err := unlock(); err != nil {
					unlockErrs.Add(1)
				}
				rel[k] = time.Now()
				if k == int64(n)-1 {
					finish()
				}
				if outside > 0 {
					time.Sleep(outside)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if bound.Err() != nil {
		tb.Fatalf("contended run did not finish %d critical sections within %v", n, runBound)
	}
	c := &contention{n: n, waits: waits, lockErrs: lockErrs.Load(), unlockErrs: unlockErrs.Load(), overlaps: overlaps.Load(), maxWins: slices.Max(wins), minWins: slices.Min(wins)}
	for k := range n {
		c.busy += rel[k].Sub(acq[k])
		if k > 0 {
			c.gaps = append(c.gaps, acq[k].Sub(rel[k-1]))
		}
	}
	c.span = rel[n-1].Sub(acq[0])
	return c
}

// report reports the contention metrics; ping is the run's median PING
// round trip, the unit of gap-pings (the median handoff gap in round trips).
func (c *contention) report(b *testing.B, ping time.Duration) {
	if c.overlaps > 0 {
		b.Errorf("%d critical sections overlapped another holder", c.overlaps)
	}
	if c.unlockErrs > 0 {
		b.Errorf("%d unlocks failed", c.unlockErrs)
	}
	if c.lockErrs > 0 {
		b.Logf("%d Lock calls gave up and were retried", c.lockErrs)
	}
	if len(c.gaps) > 0 {
		gap := median(c.gaps)
		b.ReportMetric(float64(gap.Nanoseconds())/1e3, "gap-p50-us")
		if ping > 0 {
			b.ReportMetric(float64(gap)/float64(ping), "gap-pings")
		}
	}
	b.ReportMetric(float64(percentile(c.waits, 99).Nanoseconds())/1e6, "wait-p99-ms")
	if c.span > 0 {
		b.ReportMetric(100*float64(c.busy)/float64(c.span), "busy-pct")
	}
	b.ReportMetric(100*float64(c.maxWins)/float64(c.n), "top-share-pct")
}

// ---------------------------------------------------------------------------
// PING through each client library: the round-trip floor.

func BenchmarkPing(b *testing.B) {
	srvs := getServers(b, "single", 1)
	addr := srvs[0].Addr()
	loopbackOnly(b, addr)
	ctx := context.Background()
	b.Run("go-redis", func(b *testing.B) {
		c := newGoRedis(b, addr, nil)
		for range warmups {
			if err := c.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := c.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rueidis", func(b *testing.B) {
		lk := newRueidisLocker(b, addr, nil)
		defer lk.Close()
		c := lk.Client()
		for range warmups {
			if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
