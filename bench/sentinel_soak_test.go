package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
	"github.com/redlockgo/redlock/internal/history"
	"github.com/redlockgo/redlock/internal/redistest"
)

// TestSentinelSoak is a soak, not a test: it runs only with SOAK=1, by hand
// (see BENCHMARKS.md, "Sentinel fault soak"). One master, two replicas (one
// never promotable, so that the sentinel leading a failover ends it late),
// three sentinels (down-after 500 ms); four Lockers on go-redis Sentinel
// clients with default options, four workers each on six names, fenced
// writes to a separate server. Faults one at a time: the master paused past
// down-after and resumed, SENTINEL FAILOVER, the master killed and restarted
// empty, CLIENT KILL of every normal connection. SOAK_ACKS=1 runs the
// Lockers with WithReplicaAcks(1, 100ms).
//
// Each fault opens a window from its start until one node timeout after
// every sentinel reports the new master: an overlap of two holders whose
// later acquisition falls inside one is the failover's (asynchronous
// replication: SAFETY.md); one outside every window is a defect.
func TestSentinelSoak(t *testing.T) {
	if os.Getenv("SOAK") == "" {
		t.Skip("a soak: run with SOAK=1")
	}
	const nodeTimeout = 800 * time.Millisecond // the default for the 8s TTL
	g := redistest.StartSentinel(t, redistest.WithSentinels(3))
	g.AddReplica(t)
	storage := redistest.Start(t)
	fence, err := redlock.NewRedisFence(storage.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	acks := os.Getenv("SOAK_ACKS") != ""
	ctx := context.Background()
	rec := history.New()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for k := range 4 {
		// Lockers 0 and 1 listen to sentinel 0, which leads every planned
		// failover (and the others when it wins the election); 2 and 3 to all
		// three (go-redis subscribes to whichever answers first).
		addrs := g.SentinelAddrs()
		if k < 2 {
			addrs = addrs[:1]
		}
		cl := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: g.MasterName(), SentinelAddrs: addrs})
		t.Cleanup(func() { _ = cl.Close() })
		opts := []redlock.Option{redlock.WithNodeTimeout(nodeTimeout)}
		if acks {
			opts = append(opts, redlock.WithReplicaAcks(1, 100*time.Millisecond))
		}
		lk, err := redlock.NewLocker(cl, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lk.Close() })
		for w := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					name := fmt.Sprintf("n-%d", (i+w+k)%6)
					c, cancel := context.WithTimeout(ctx, 2*time.Second)
					l, err := lk.Lock(c, name)
					cancel()
					if err != nil {
						time.Sleep(20 * time.Millisecond)
						continue
					}
					a := rec.Acquired(l.Name(), l.Owner(), l.Token(), time.Now(), l.Until())
					_ = rec.Fenced(name, l.Token(), func() error {
						return fence.Set(ctx, "resource:"+name, l.Token(), l.Owner(), 0)
					})
					select {
					case <-time.After(time.Duration(20+30*w) * time.Millisecond):
					case <-l.Done():
					}
					now := time.Now()
					if l.Err() != nil {
						rec.Lost(a, now)
						rec.DoneClosed(a, now)
					} else {
						// Done closes as Unlock starts, before its round trip.
						rec.Released(a, now)
						rec.DoneClosed(a, now)
						_ = l.Unlock(ctx)
					}
				}
			})
		}
	}
	type window struct {
		what       string
		start, end time.Time
	}
	var windows []window
	settle := 3 * time.Second
	time.Sleep(settle)
	faults := strings.Split(orDefault(os.Getenv("SOAK_FAULTS"), "pause,failover,kill,clientkill,pause,failover"), ",")
	for _, f := range faults {
		start := time.Now()
		switch f {
		case "pause":
			old := g.PauseMaster(t)
			old.Resume(t)
		case "failover":
			g.Failover(t)
		case "kill":
			old := g.Master(t)
			g.KillMaster(t)
			old.Restart(t)
		case "clientkill":
			g.Master(t).Do(t, "CLIENT", "KILL", "TYPE", "normal")
		default:
			t.Fatalf("unknown fault %q", f)
		}
		windows = append(windows, window{f, start, time.Now().Add(nodeTimeout)})
		t.Logf("%s: %v until every sentinel reported the new master", f, time.Since(start).Round(time.Millisecond))
		time.Sleep(settle)
		if f != "clientkill" {
			g.SyncReplica(t)
		}
		time.Sleep(settle)
	}
	close(stop)
	wg.Wait()

	inside := func(at time.Time) string {
		for _, w := range windows {
			if !at.Before(w.start) && !at.After(w.end) {
				return w.what
			}
		}
		return ""
	}
	counts := map[string]int{}
	for _, v := range rec.Check() {
		where := "outside"
		if v.Kind == history.Overlap || v.Kind == history.LateDone || v.Kind == history.TokenOrder {
			// The later acquisition's time is the last "+..." offset of the detail.
			if w := inside(laterAcquisition(rec, v)); w != "" {
				where = "during " + w
			}
		}
		counts[string(v.Kind)+" "+where]++
		if where == "outside" {
			t.Logf("%s", v)
		}
	}
	t.Logf("acks=%v faults=%v: %d acquisitions, %d writes; violations by kind and place: %v",
		acks, faults, len(rec.Acquisitions()), len(rec.Writes()), counts)
	for k, n := range counts {
		if strings.HasSuffix(k, "outside") && !strings.HasPrefix(k, string(history.StaleWrite)) {
			t.Errorf("%d %s", n, k)
		}
	}
}

// laterAcquisition finds when the later of the acquisitions a violation
// names (by sequence number) was made.
func laterAcquisition(rec *history.Recorder, v history.Violation) time.Time {
	var at time.Time
	for _, a := range rec.Acquisitions() {
		if a.Name == v.Name && strings.Contains(v.Detail, fmt.Sprintf("#%d %q", a.Seq, a.Name)) && a.AcquiredAt.After(at) {
			at = a.AcquiredAt
		}
	}
	return at
}

func orDefault(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
