package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlockgo/redlock/internal/lifecycle"
	"github.com/redlockgo/redlock/internal/node"
)

// follower keeps a core's go-redis Sentinel clients (redis.NewFailoverClient)
// on the current master. Such a client moves its pooled connections to a
// new master when the one sentinel it subscribed to publishes
// +switch-master, or when it dials (its dialer asks that sentinel where the
// master is). The sentinel that leads a failover answers with the new
// master from the moment it reconfigures the other replicas, but publishes
// +switch-master only at the end of the failover, once every other replica
// follows the new master or the failover timeout passed: seconds later. A
// client subscribed to it, with enough pooled connections not to dial, kept
// sending lock scripts to the demoted master, which stays writable until
// Sentinel converts it, while clients subscribed to the other sentinels
// granted the same names on the new master.
//
// So while the core is in use (a lock held, or an acquisition within
// followIdle), the follower dials through each such client's dialer every
// interval and closes the connection at once: no command reaches the
// master, and a dial that finds the master moved makes the client drop its
// connections to the old one. An acquisition after the follower went idle
// makes that check first (fresh), so it cannot be the first call on a
// stale pool.
type follower struct {
	life  *lifecycle.Life
	dials []func(context.Context) // one per Sentinel client
	every time.Duration
	busy  func() bool // a lock is held
	// last is the latest acquisition (unix ns); active is set while the
	// loop runs.
	last   atomic.Int64
	active atomic.Bool
	mu     sync.Mutex // one check at a time
}

// followIdle is how long after its last acquisition, with no lock held, a
// core keeps following; an acquisition after that checks first.
const followIdle = 10 * time.Second

// newFollower returns the follower of nodes, nil when none is a Sentinel
// client. every is the interval between checks: a quarter of a second, or
// half the node timeout when that is shorter, so that a core follows a
// failover within the node timeout.
func newFollower(nodes []*node.Node, life *lifecycle.Life, nodeTimeout time.Duration, busy func() bool) *follower {
	var dials []func(context.Context)
	for _, n := range nodes {
		if d := node.SentinelDialer(n.Client); d != nil {
			dials = append(dials, func(ctx context.Context) {
				if cn, err := d(ctx, "tcp", node.FailoverAddr); err == nil {
					_ = cn.Close()
				}
			})
		}
	}
	if len(dials) == 0 {
		return nil
	}
	return &follower{life: life, dials: dials, every: max(min(FollowEvery, nodeTimeout/2), 10*time.Millisecond), busy: busy}
}

// acquiring records an acquisition about to be sent. When the follower is
// idle it checks now, bounded by timeout, and starts following again: the
// pool may not have been used since before a failover.
func (f *follower) acquiring(ctx context.Context, timeout time.Duration) {
	if f == nil {
		return
	}
	f.last.Store(time.Now().UnixNano())
	if f.active.Load() {
		return
	}
	f.check(ctx, timeout)
	if f.active.CompareAndSwap(false, true) {
		if !f.life.GoCount(1) {
			f.active.Store(false)
			return
		}
		go func() {
			defer f.life.WG.Done()
			f.run()
		}()
	}
}

// check dials through every Sentinel client at once, each bounded by
// timeout.
func (f *follower) check(ctx context.Context, timeout time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, d := range f.dials {
		wg.Go(func() { d(ctx) })
	}
	wg.Wait()
}

// run checks every interval while a lock is held or an acquisition came
// within followIdle, then returns (active cleared) until the next
// acquisition starts it again.
func (f *follower) run() {
	defer f.active.Store(false)
	t := time.NewTimer(f.every)
	defer t.Stop()
	for {
		select {
		case <-f.life.Closing:
			return
		case <-t.C:
		}
		if !f.busy() && time.Since(time.Unix(0, f.last.Load())) > followIdle {
			return
		}
		f.check(context.Background(), f.every)
		t.Reset(f.every)
	}
}
