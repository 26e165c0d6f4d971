package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
	"github.com/redlockgo/redlock/internal/redistest"
)

// BenchmarkRedlockOneMasterFaulted measures what one faulted master of
// three costs contending workers (issue "redlock-minority"): four Redlocks
// with four workers each take six names in turn (hold 5 ms) for a window
// with every master healthy, then for a window with master 0 SIGSTOPped,
// alternating; go-redis default clients. It reports acquisitions per
// second in each state (medians of the rounds) and their ratio. Run by
// hand:
//
//	go test -run '^$' -bench RedlockOneMasterFaulted -benchtime 1x .
func BenchmarkRedlockOneMasterFaulted(b *testing.B) {
	srvs := make([]*redistest.Server, 3)
	for i := range srvs {
		s, err := redistest.Launch("--loglevel", "warning")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Stop() })
		srvs[i] = s
	}
	var rls []*redlock.Redlock
	for range 4 {
		var cls []redlock.Client
		for _, s := range srvs {
			cl := redis.NewClient(&redis.Options{Addr: s.Addr()})
			b.Cleanup(func() { _ = cl.Close() })
			cls = append(cls, cl)
		}
		rl, err := redlock.NewRedlock(cls, redlock.WithTTL(2*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = rl.Close() })
		rls = append(rls, rl)
	}
	var got atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	ctx := context.Background()
	for k, rl := range rls {
		for w := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					c, cancel := context.WithTimeout(ctx, 2*time.Second)
					l, err := rl.Lock(c, fmt.Sprintf("fault-%d", (i+w+k)%6))
					cancel()
					if err != nil {
						continue
					}
					got.Add(1)
					time.Sleep(5 * time.Millisecond)
					_ = l.Unlock(ctx)
				}
			})
		}
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	const window, rounds = 3 * time.Second, 3
	rate := func() float64 {
		n0 := got.Load()
		time.Sleep(window)
		return float64(got.Load()-n0) / window.Seconds()
	}
	var healthy, faulted []float64
	for range b.N {
		for range rounds {
			time.Sleep(time.Second) // settle after a heal
			healthy = append(healthy, rate())
			srvs[0].Pause(b)
			faulted = append(faulted, rate())
			srvs[0].Resume(b)
		}
	}
	h, f := medianF(healthy), medianF(faulted)
	b.ReportMetric(h, "acq/s-healthy")
	b.ReportMetric(f, "acq/s-faulted")
	b.ReportMetric(f/h, "faulted/healthy")
}

func medianF(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}
