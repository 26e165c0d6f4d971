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
// stale pool; it waits for the check at most one node timeout, and not past
// its ctx (see acquiring).
type follower struct {
	life  *lifecycle.Life
	dials []func(context.Context) // one per Sentinel client
	every time.Duration
	busy  func() bool // a lock is held
	// last is the latest acquisition (unix ns); active is set while the
	// loop runs.
	last   atomic.Int64
	active atomic.Bool
	mu     sync.Mutex
	// checking is closed when the check in flight ends; nil while none is
	// (mu). One check at a time, shared by whoever asks for one meanwhile.
	checking chan struct{}
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
// idle it checks now and starts following again: the pool may not have been
// used since before a failover. The caller waits for the check at most
// timeout (then goes on, as after a check that timed out), and not past the
// end of ctx: go-redis bounds a dial's query to a sentinel by the Sentinel
// client's own timeouts, not by ctx (unless ContextTimeoutEnabled), so a
// silent sentinel held every acquisition for seconds, one after the other.
// The attempt that follows finds ctx ended and says so (ErrNotObtained and
// ctx.Err()); the check goes on without it, for the next acquisition.
func (f *follower) acquiring(ctx context.Context, timeout time.Duration) {
	if f == nil {
		return
	}
	f.last.Store(time.Now().UnixNano())
	if f.active.Load() {
		return
	}
	t := node.GetTimer(timeout)
	defer node.PutTimer(t)
	select {
	case <-f.check(ctx, timeout):
	case <-t.C:
	case <-ctx.Done():
		return
	}
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

// check starts a check unless one is in flight, and returns the channel
// closed when the one in flight ends (at once after Close). A check dials
// through every Sentinel client at once, each bounded by timeout, on a
// goroutine that Close waits for.
func (f *follower) check(ctx context.Context, timeout time.Duration) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.checking != nil {
		return f.checking
	}
	done := make(chan struct{})
	if !f.life.GoCount(1) {
		close(done)
		return done
	}
	f.checking = done
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	go func() {
		defer f.life.WG.Done()
		defer cancel()
		var wg sync.WaitGroup
		for _, d := range f.dials {
			wg.Go(func() { d(ctx) })
		}
		wg.Wait()
		f.mu.Lock()
		f.checking = nil
		f.mu.Unlock()
		close(done)
	}()
	return done
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
		select {
		case <-f.check(context.Background(), f.every):
		case <-f.life.Closing:
			return
		}
		t.Reset(f.every)
	}
}
