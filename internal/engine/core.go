package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redlockgo/redlock/internal/lifecycle"
	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/pubsub"
)

// Core is the engine shared by Locker (one node) and Redlock (N nodes): the
// registry of held locks, its lifecycle (internal/lifecycle), and the engine side
// of the seam with Lock (engine). It owns the parts it drives: the pool of
// nodes and its quorum round (quorum.go), the watchdog (watchdog.go) and
// the loss clock (expiry.go), the tracker and its verifier (track.go,
// verify.go), and the local queue of waiters with its pub/sub transport
// (queue.go, internal/pubsub). A Locker is a core with a quorum of 1.
// See "Architecture" in the root package's doc.go.
type Core struct {
	Pool  *Pool
	Life  *lifecycle.Life
	Cfg   Config
	wd    *watchdog
	Exp   *expiry
	Hooks hooks

	names    *heldNames
	Withdraw withdrawals // writers that gave up and are leaving their name's queue (obtain.go)
	Waits    *waiters    // the local queues of waiting Lock calls (queue.go), woken by pub/sub (internal/pubsub)
	Track    *Tracker    // hears outside changes of held keys (track.go); nil without tracking
	follow   *follower   // keeps Sentinel clients on the current master (follow.go); nil without one

	closed chan struct{} // closed when Close returns: a second Close waits for it

	mu sync.Mutex
	// closeStarted: Close has begun; no new lock may be registered.
	closeStarted bool
	held         map[*Hold]struct{}
}

// hooks let tests put a pause at an exact point of the protocol.
type hooks struct {
	BeforeFinalCheck func() // after the last reply (and token write-back), before now < Until
}

// warmUpLimit bounds how long a constructor waits for its nodes to answer
// the warm-up (dial, script load, identity); a node still silent by then is
// dialled by its first call.
const warmUpLimit = time.Second

func NewCore[O ~func(*Config)](clients []node.Client, opts []O) (*Core, error) {
	if len(clients) == 0 {
		return nil, errors.New("redlock: no clients")
	}
	cfg, err := WithOptions(DefaultConfig(), opts)
	if err != nil {
		return nil, err
	}
	life := &lifecycle.Life{Closing: make(chan struct{}), Idle: make(chan func())}
	p := &Pool{Quorum: len(clients)/2 + 1, cleanup: cleanup{life: life}}
	c := &Core{
		Pool:   p,
		Life:   life,
		Cfg:    cfg,
		closed: make(chan struct{}),
		held:   make(map[*Hold]struct{}),
	}
	c.Cfg.ttlBoxed = ttlMillis(cfg.TTL)
	c.Cfg.Sharded = allClusters(clients)
	c.names = &heldNames{n: make(map[string]int)}
	for i, cl := range clients {
		if node.IsNil(cl) {
			return nil, fmt.Errorf("redlock: client %d is nil", i)
		}
		n := node.New(i, cl)
		n.Gated = len(clients) > 1
		for _, prev := range p.Nodes {
			if node.SamePointer(prev.Client, cl) || (node.ServerKey(cl) != "" && node.ServerKey(prev.Client) == node.ServerKey(cl)) {
				return nil, fmt.Errorf("redlock: clients %d and %d are the same node (%s); Redlock needs independent masters", prev.Idx, i, n.Addr)
			}
		}
		p.Nodes = append(p.Nodes, n)
	}
	p.Ids.nodes = p.Nodes
	c.Waits = newWaiters(c.names)
	c.Waits.PS = pubsub.New(p.Nodes, p.Quorum, life, cfg.Logger, c.Waits, c.Cfg.Sharded)
	if !cfg.NoTracking {
		v := &Verifier{Pool: p, Abandon: c.Abandon}
		c.Track = newTracker(p.Nodes, life, cfg.Logger, v.Verify)
		v.DataDone = c.Track.dataDone
	}
	if err := p.Ids.warmUp(life, cfg.Timeout(cfg.TTL)); err != nil {
		c.Track.close()
		life.Stop()
		lifecycle.WaitUntil(&life.WG, time.Now().Add(warmUpLimit))
		return nil, err
	}
	c.follow = newFollower(p.Nodes, life, cfg.Timeout(cfg.TTL), c.holding)
	c.wd = newWatchdog(c)
	c.Exp = newExpiry()
	return c, nil
}

// holding reports that the core holds a lock.
func (c *Core) holding() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.held) > 0
}

// activate turns a granted attempt into a held lock and registers it with the
// core and, with auto-renew, the watchdog: a renewal is due renewEvery after
// now, or, for a lock that took over the lease in force (in, a hand-off),
// when that lease's was. A grant that arrives after Close started has no
// owner: it is released at once.
func (c *Core) activate(l *Hold, token int64, until time.Time, in *inherited) error {
	c.mu.Lock()
	if c.closeStarted {
		c.mu.Unlock()
		l.finish(stateFailed, "")
		c.Pool.releaseOn(context.Background(), l, c.Pool.Nodes, l.timeout, Never)
		return Say.ErrClosed
	}
	// Registered and held in one step under c.mu, so Close either sees the
	// lock held (and releases it) or refuses it above; never in between.
	c.held[l] = struct{}{}
	c.names.add(l.Key(), 1)
	c.Track.heldNow(l)
	c.Exp.set(l, l.hold(token, until, in))
	c.mu.Unlock()
	if l.autoRenew {
		if in != nil {
			c.wd.schedule(l, in.renewAt)
		} else {
			c.wd.schedule(l, renewAt(l, time.Now()))
		}
	}
	return nil
}

// renewed records a renewal of l (Extend, the watchdog) to a lease of ttl
// valid until until, and re-arms its loss; false if l is no longer held.
func (c *Core) renewed(l *Hold, ttl time.Duration, until time.Time) bool {
	at, ok := l.renewed(ttl, until)
	if ok {
		c.Exp.set(l, at)
		if !l.is(stateHeld) {
			c.Exp.remove(l) // released meanwhile: its ended may have come first
		}
	}
	return ok
}

// Abandon releases a lost lock's key on every node from a goroutine of the
// core, waiting for nothing (engine): its holder gave it up by rule.
func (c *Core) Abandon(l *Hold) { c.Pool.releaseInBackground(context.Background(), c.Pool.Nodes, l) }

// wakeOwn wakes this core's waiters for l's name once l has been released:
// they queued behind l here and made no attempt of their own, or one that a
// holder of ours refused, so nothing marked the name waited for and the
// release published nothing (release.lua; acquire.lua's UnmarkedPrefix).
// Woken early (a release still on its way), a waiter's attempt is refused
// and marks the name, and the release then publishes.
func (c *Core) wakeOwn(l *Hold) { c.Waits.dispatch(l.Channel, l.Owner, true) }

// ended is the one notice a Lock sends up (engine): it left stateHeld, or
// its attempt failed, for to. The core drops it from its registries, and
// tells the observer, the log and Do.
func (c *Core) ended(l *Hold, to lockState) {
	c.forget(l)
	if to != stateReleased {
		c.Track.unwatch(l) // a release unwatches once it has answered (unlock)
	}
	fns, cause, maxHold := l.ending()
	noteEnd(l, to, cause)
	if to == stateFailed {
		return
	}
	if to == stateLost && maxHold {
		// Free the name now rather than at the end of the lease: a holder
		// that outstays its cap must not block others either.
		c.Abandon(l)
		if l.Kind == KindExclusive {
			c.wakeOwn(l)
		}
	}
	for _, f := range fns {
		f(cause)
	}
}

// forget drops a lock that is no longer held from the registry, the
// watchdog and the loss clock. The lock's state changed first, so none can
// re-add it.
func (c *Core) forget(l *Hold) {
	c.mu.Lock()
	_, was := c.held[l]
	delete(c.held, l)
	c.mu.Unlock()
	if was {
		c.names.add(l.Key(), -1)
		c.Waits.idle(l.Channel)
	}
	c.wd.remove(l)
	c.Exp.remove(l)
}

// Close cancels every Do and marks every held lock released (Done closes
// first), releases them on the nodes in one pipelined round per node settled
// by quorum, closes the pub/sub connections, and waits for the core's
// goroutines; all within one node timeout. What a node did not answer by
// then is released again after Close returns (releaseNode).
func (c *Core) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	if c.closeStarted {
		c.mu.Unlock()
		<-c.closed // a concurrent Close returns when the first one does
		return nil
	}
	c.closeStarted = true
	defer close(c.closed)
	close(c.Life.Closing)
	held := make([]*Hold, 0, len(c.held))
	for l := range c.held {
		held = append(held, l)
	}
	c.mu.Unlock()

	deadline := time.Now().Add(c.Cfg.Timeout(c.Cfg.TTL))
	c.wd.stop()
	var live []*Hold
	for _, l := range held {
		if l.finish(stateReleased, whyClosed) {
			live = append(live, l)
		}
	}
	var unsure []*Hold
	for i, res := range c.Pool.batch(context.Background(), live, nil, deadline, nil, nil, nil, nil, nil) {
		if res.failed > 0 { // a node's error, or silence until the deadline
			unsure = append(unsure, live[i])
		}
	}
	// A node that did not answer may run the release later, or never (a
	// call bounded by the node timeout drops its connection): released
	// until it answers, after Close has returned (releaseNode).
	c.Pool.releaseInBackground(context.Background(), c.Pool.Nodes, unsure...)
	c.Waits.close()
	c.Track.close()
	c.Exp.stop()

	c.Life.Stop()
	lifecycle.WaitUntil(&c.Life.WG, deadline)
	return nil
}

// ErrNoCore is what a nil or zero Locker or Redlock answers.
var ErrNoCore = errors.New("redlock: Locker or Redlock not made by NewLocker or NewRedlock")

// attempt makes one attempt of a (acquire.go) and makes a granted lock
// held: the lock, or an error matching ErrNotObtained with what the attempt
// found out (see verdict).
func (c *Core) attempt(ctx context.Context, a *Acquisition) (*Hold, verdict, error) {
	if c.Life.IsClosing() {
		return nil, verdict{hint: -1, permanent: true}, Say.Join(Say.NotObtained(a.Name), Say.ErrClosed)
	}
	l := a.newLock(c, len(c.Pool.Nodes))
	at := attempt{p: c.Pool, l: l, cfg: a.Cfg, timeout: a.Cfg.Timeout(a.Cfg.TTL)}
	c.follow.acquiring(ctx, at.timeout)
	c.Track.watch(l)
	c.Track.expect(l)
	granted, err := at.run(ctx, a.Cfg.ttlArg(), a.waitID(l))
	c.Track.settle(l, granted)
	if err != nil {
		c.Track.unwatch(l)
		return nil, verdict{hint: -1, permanent: true}, Say.Join(Say.NotObtained(a.Name), err)
	}
	if granted {
		if c.Hooks.BeforeFinalCheck != nil {
			c.Hooks.BeforeFinalCheck()
		}
		// Step 3, last: the lock counts only if it is still valid now,
		// after every round trip, so any pause before this line is caught,
		// and only if the caller still waits for it: a grant whose reply
		// raced the end of ctx (gather picks either) is released, and the
		// call says why, as when ctx ended first.
		switch {
		case ctx.Err() != nil:
			at.interrupted = true
		case time.Now().Before(at.until):
			if err := c.activate(l, at.token, at.until, nil); err != nil {
				return nil, verdict{hint: -1, permanent: true}, Say.Join(Say.NotObtained(a.Name), err)
			}
			return l, verdict{hint: -1, answered: true}, nil
		default:
			at.t.Errs = append(at.t.Errs, fmt.Errorf("redlock: validity of %v used up before the grant completed", a.Cfg.TTL))
		}
	}
	c.Track.unwatch(l) // refused, or granted too late: l.fail ends it without ended
	permanent, err := at.fail(ctx)
	return nil, verdict{hint: at.hint, permanent: permanent, answered: at.t.OK+at.t.No >= c.Pool.Quorum, firm: at.firm, contested: at.contested}, err
}

// verdict is what a failed attempt found out: the holder's remaining lease
// (negative when unknown), whether retrying is pointless, whether a
// quorum of nodes answered at all (granted or refused): an attempt that
// could not get an answer is not contention (WithUnansweredLimit), and who
// holds the name (attempt.firm, attempt.contested).
type verdict struct {
	hint                time.Duration
	permanent, answered bool
	firm                string // see attempt.firm
	contested           bool
}

// unlock releases l on every node where it is still ours (engine: see
// Lock.Unlock).
func (c *Core) unlock(ctx context.Context, l *Hold) error {
	c.Withdraw.wait(l.Channel, l.timeout)
	changed, wasLost := l.release()
	if changed {
		defer c.Track.retire(l)
		c.ended(l, stateReleased)
		if kinds[l.Kind].handsOff && len(c.Pool.Nodes) == 1 {
			// A goroutine of ours waits for the name: release and grant
			// in one script, no message, no acquire round trip.
			if w := c.Waits.reserveHead(l.Channel); w != nil {
				if done, err := (handOff{c: c, l: l, w: w}).run(ctx); done {
					return err
				}
			}
		}
	} else if !wasLost {
		return Say.ErrAlreadyReleased
	}
	// Every node that may hold something of ours, the spec's rule: now
	// where the acquire answered, and where it has not yet, by its own call
	// once it does (releaseTo): one release per master, none that runs
	// before the grant it is meant to undo.
	if changed {
		c.Track.expect(l) // l stays watched: its release is its own write
	}
	rs := c.Pool.releaseOn(ctx, l, l.releaseTo(c.Pool.Nodes), l.timeout, c.Pool.Settled)
	if changed {
		released := c.Pool.Count(rs).OK > 0
		c.Track.settle(l, released)
		if released && l.Kind == KindExclusive {
			c.wakeOwn(l)
		}
	}
	if !changed {
		// A lost lock may still have our key on some node; the release above
		// cleared it, but the lock was not held.
		return Say.NotHeld("unlock", l.Name, l.Err())
	}
	return c.Pool.released(l, rs)
}

// extend moves l's lease to ttl on every node (engine: see Lock.Extend).
func (c *Core) extend(ctx context.Context, l *Hold, ttl time.Duration) error {
	// The watchdog may be renewing l right now, holding IO until its batch
	// settles: on a paused server, at l's Until. Waiting for it is bounded by
	// ctx like the rest of the call, and a wait cut short changed nothing, so
	// l stays held until its current Until: no ErrNotHeld.
	if err := l.IO.LockCtx(ctx); err != nil {
		return fmt.Errorf("redlock: extend %q: waited for a renewal in flight; the lock stays held until its current Until: %w", l.Name, err)
	}
	defer l.IO.Unlock()
	if err := l.Err(); err != nil {
		return Say.NotHeld("extend", l.Name, err)
	}
	t1 := time.Now()
	until := ValidUntil(t1, ttl, l.driftFactor)
	c.Track.expect(l)
	rs, interrupted, err := c.Pool.extend(ctx, l, ttl, earliest(t1.Add(l.timeout), until))
	c.Track.settle(l, true)
	if err != nil {
		return err
	}
	switch t := c.Pool.Count(rs); {
	case t.OK >= c.Pool.Quorum && !interrupted && time.Now().Before(until):
		if !c.renewed(l, ttl, until) {
			if l.is(stateLost) {
				c.Abandon(l) // lost meanwhile: the moved lease must not keep the name
			}
			return Say.NotHeld("extend", l.Name, l.Err())
		}
		if l.autoRenew {
			c.wd.schedule(l, renewAt(l, t1))
		}
		return nil
	case c.Pool.Impossible(t.No):
		taken, late := refusalsIn(rs)
		l.lose(refusalReason(t.No, taken, late), nil)
		if t.OK > 0 {
			c.Abandon(l) // the masters that moved it must not keep the name
		}
		return Say.NotHeld("extend", l.Name, l.Err())
	default:
		if at, earlier, ok := l.extendUnknown(ttl, until); ok {
			c.Exp.set(l, at)
			if earlier && l.autoRenew {
				// A lease shorter than the one in force may have been set:
				// renew now, to a lease of l's TTL, rather than after
				// l's valid time.
				c.wd.schedule(l, time.Now())
			}
		}
		return c.Pool.ShortOf("extend", l.Name, t, " within validity; the lock stays held until its current Until (the earlier of the two leases)", CtxErrIf(ctx, interrupted))
	}
}

// remaining is l's lease on the server (engine: Lock.TTL).
func (c *Core) remaining(ctx context.Context, l *Hold) (time.Duration, error) {
	return c.Pool.remaining(ctx, l)
}
