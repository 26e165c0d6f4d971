package redlock

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

// core is the engine shared by Locker (one node) and Redlock (N nodes): the
// registry of held locks, its lifecycle (lifecycle.go), and the engine side
// of the seam with Lock (engine). It owns the parts it drives: the pool of
// nodes and its quorum round (quorum.go), the watchdog (watchdog.go) and
// the loss clock (expiry.go), the tracker and its verifier (track.go,
// verify.go), and the local queue of waiters with its pub/sub transport
// (queue.go, pubsub.go). A Locker is a core with a quorum of 1.
// See "Architecture" in doc.go.
type core struct {
	pool  *pool
	life  *lifecycle.Life
	cfg   config
	wd    *watchdog
	exp   *expiry
	hooks hooks

	names    *heldNames
	withdraw withdrawals // writers that gave up and are leaving their name's queue (obtain.go)
	waits    *waiters    // the local queues of waiting Lock calls (queue.go), woken by pub/sub (pubsub.go)
	track    *tracker    // hears outside changes of held keys (track.go); nil without tracking
	follow   *follower   // keeps Sentinel clients on the current master (follow.go); nil without one

	closed chan struct{} // closed when Close returns: a second Close waits for it

	mu sync.Mutex
	// closeStarted: Close has begun; no new lock may be registered.
	closeStarted bool
	held         map[*hold]struct{}
}

// hooks let tests put a pause at an exact point of the protocol.
type hooks struct {
	beforeFinalCheck func() // after the last reply (and token write-back), before now < Until
}

// warmUpLimit bounds how long a constructor waits for its nodes to answer
// the warm-up (dial, script load, identity); a node still silent by then is
// dialled by its first call.
const warmUpLimit = time.Second

func newCore[O ~func(*config)](clients []node.Client, opts []O) (*core, error) {
	if len(clients) == 0 {
		return nil, errors.New("redlock: no clients")
	}
	cfg, err := withOptions(defaultConfig(), opts)
	if err != nil {
		return nil, err
	}
	life := &lifecycle.Life{Closing: make(chan struct{})}
	p := &pool{quorum: len(clients)/2 + 1, cleanup: cleanup{life: life}}
	c := &core{
		pool:   p,
		life:   life,
		cfg:    cfg,
		closed: make(chan struct{}),
		held:   make(map[*hold]struct{}),
	}
	c.cfg.ttlBoxed = ttlMillis(cfg.ttl)
	c.cfg.sharded = allClusters(clients)
	c.names = &heldNames{n: make(map[string]int)}
	for i, cl := range clients {
		if node.IsNil(cl) {
			return nil, fmt.Errorf("redlock: client %d is nil", i)
		}
		n := node.New(i, cl)
		n.Gated = len(clients) > 1
		for _, prev := range p.nodes {
			if node.SamePointer(prev.Client, cl) || (node.ServerKey(cl) != "" && node.ServerKey(prev.Client) == node.ServerKey(cl)) {
				return nil, fmt.Errorf("redlock: clients %d and %d are the same node (%s); Redlock needs independent masters", prev.Idx, i, n.Addr)
			}
		}
		p.nodes = append(p.nodes, n)
	}
	p.ids.nodes = p.nodes
	c.waits = newWaiters(c.names)
	c.waits.ps = pubsub.New(p.nodes, p.quorum, life, cfg.logger, c.waits, c.cfg.sharded)
	if !cfg.noTracking {
		v := &verifier{pool: p, abandon: c.abandon}
		c.track = newTracker(p.nodes, life, cfg.logger, v.verify)
		v.dataDone = c.track.dataDone
	}
	if err := p.ids.warmUp(life, cfg.timeout(cfg.ttl)); err != nil {
		c.track.close()
		life.Stop()
		lifecycle.WaitUntil(&life.WG, time.Now().Add(warmUpLimit))
		return nil, err
	}
	c.follow = newFollower(p.nodes, life, cfg.timeout(cfg.ttl), c.holding)
	c.wd = newWatchdog(c)
	c.exp = newExpiry()
	return c, nil
}

// holding reports that the core holds a lock.
func (c *core) holding() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.held) > 0
}

// activate turns a granted attempt into a held lock and registers it with the
// core and, with auto-renew, the watchdog. A grant that arrives after Close
// started has no owner: it is released at once.
func (c *core) activate(l *hold, token int64, until time.Time) error {
	c.mu.Lock()
	if c.closeStarted {
		c.mu.Unlock()
		l.finish(stateFailed, "")
		c.pool.releaseOn(context.Background(), l, c.pool.nodes, l.timeout, never)
		return say.errClosed
	}
	// Registered and held in one step under c.mu, so Close either sees the
	// lock held (and releases it) or refuses it above; never in between.
	c.held[l] = struct{}{}
	c.names.add(l.Key(), 1)
	c.track.heldNow(l)
	c.exp.set(l, l.hold(token, until))
	c.mu.Unlock()
	if l.autoRenew {
		c.wd.schedule(l, renewAt(l, time.Now()))
	}
	return nil
}

// renewed records a renewal of l (Extend, the watchdog) to a lease of ttl
// valid until until, and re-arms its loss; false if l is no longer held.
func (c *core) renewed(l *hold, ttl time.Duration, until time.Time) bool {
	at, ok := l.renewed(ttl, until)
	if ok {
		c.exp.set(l, at)
		if !l.is(stateHeld) {
			c.exp.remove(l) // released meanwhile: its ended may have come first
		}
	}
	return ok
}

// abandon releases a lost lock's key on every node from a goroutine of the
// core, waiting for nothing (engine): its holder gave it up by rule.
func (c *core) abandon(l *hold) { c.pool.releaseInBackground(context.Background(), c.pool.nodes, l) }

// wakeOwn wakes this core's waiters for l's name once l has been released:
// they queued behind l here and made no attempt of their own, so nothing
// marked the name waited for and the release published nothing
// (release.lua). Woken early (a release still on its way), a waiter's
// attempt is refused and marks the name, and the release then publishes.
func (c *core) wakeOwn(l *hold) { c.waits.Dispatch(l.channel, l.owner) }

// ended is the one notice a Lock sends up (engine): it left stateHeld, or
// its attempt failed, for to. The core drops it from its registries, and
// tells the observer, the log and Do.
func (c *core) ended(l *hold, to lockState) {
	c.forget(l)
	if to != stateReleased {
		c.track.unwatch(l) // a release unwatches once it has answered (unlock)
	}
	fns, cause, maxHold := l.ending()
	noteEnd(l, to, cause)
	if to == stateFailed {
		return
	}
	if to == stateLost && maxHold {
		// Free the name now rather than at the end of the lease: a holder
		// that outstays its cap must not block others either.
		c.abandon(l)
		if l.kind == kindExclusive {
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
func (c *core) forget(l *hold) {
	c.mu.Lock()
	_, was := c.held[l]
	delete(c.held, l)
	c.mu.Unlock()
	if was {
		c.names.add(l.Key(), -1)
		c.waits.idle(l.channel)
	}
	c.wd.remove(l)
	c.exp.remove(l)
}

// close cancels every Do and marks every held lock released (Done closes
// first), releases them on the nodes in one pipelined round per node settled
// by quorum, closes the pub/sub connections, and waits for the core's
// goroutines; all within one node timeout. What a node did not answer by
// then is released again after Close returns (releaseNode).
func (c *core) close() error {
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
	close(c.life.Closing)
	held := make([]*hold, 0, len(c.held))
	for l := range c.held {
		held = append(held, l)
	}
	c.mu.Unlock()

	deadline := time.Now().Add(c.cfg.timeout(c.cfg.ttl))
	c.wd.stop()
	var live []*hold
	for _, l := range held {
		if l.finish(stateReleased, whyClosed) {
			live = append(live, l)
		}
	}
	var unsure []*hold
	for i, res := range c.pool.batch(context.Background(), live, nil, deadline, nil, nil, nil, nil, nil) {
		if res.failed > 0 { // a node's error, or silence until the deadline
			unsure = append(unsure, live[i])
		}
	}
	// A node that did not answer may run the release later, or never (a
	// call bounded by the node timeout drops its connection): released
	// until it answers, after Close has returned (releaseNode).
	c.pool.releaseInBackground(context.Background(), c.pool.nodes, unsure...)
	c.waits.close()
	c.track.close()
	c.exp.stop()

	c.life.Stop()
	lifecycle.WaitUntil(&c.life.WG, deadline)
	return nil
}

// errNoCore is what a nil or zero Locker or Redlock answers.
var errNoCore = errors.New("redlock: Locker or Redlock not made by NewLocker or NewRedlock")

// attempt makes one attempt of a (acquire.go) and makes a granted lock
// held: the lock, or an error matching ErrNotObtained with what the attempt
// found out (see verdict).
func (c *core) attempt(ctx context.Context, a *acquisition) (*hold, verdict, error) {
	if c.life.IsClosing() {
		return nil, verdict{hint: -1, permanent: true}, say.join(say.notObtained(a.name), say.errClosed)
	}
	l := a.newLock(c, len(c.pool.nodes))
	at := attempt{p: c.pool, l: l, cfg: a.cfg, timeout: a.cfg.timeout(a.cfg.ttl)}
	c.follow.acquiring(ctx, at.timeout)
	c.track.watch(l)
	c.track.expect(l)
	granted, err := at.run(ctx, a.cfg.ttlArg(), a.waitID(l))
	c.track.settle(l, granted)
	if err != nil {
		c.track.unwatch(l)
		return nil, verdict{hint: -1, permanent: true}, say.join(say.notObtained(a.name), err)
	}
	if granted {
		if c.hooks.beforeFinalCheck != nil {
			c.hooks.beforeFinalCheck()
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
			if err := c.activate(l, at.token, at.until); err != nil {
				return nil, verdict{hint: -1, permanent: true}, say.join(say.notObtained(a.name), err)
			}
			return l, verdict{hint: -1, answered: true}, nil
		default:
			at.t.errs = append(at.t.errs, fmt.Errorf("redlock: validity of %v used up before the grant completed", a.cfg.ttl))
		}
	}
	c.track.unwatch(l) // refused, or granted too late: l.fail ends it without ended
	permanent, err := at.fail(ctx)
	return nil, verdict{hint: at.hint, permanent: permanent, answered: at.t.ok+at.t.no >= c.pool.quorum, firm: at.firm, contested: at.contested}, err
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
func (c *core) unlock(ctx context.Context, l *hold) error {
	c.withdraw.wait(l.channel, l.timeout)
	changed, wasLost := l.release()
	if changed {
		defer c.track.retire(l)
		c.ended(l, stateReleased)
		if kinds[l.kind].handsOff && len(c.pool.nodes) == 1 {
			// A goroutine of ours waits for the name: release and grant
			// in one script, no message, no acquire round trip.
			if w := c.waits.reserveHead(l.channel); w != nil {
				if done, err := (handOff{c: c, l: l, w: w}).run(ctx); done {
					return err
				}
			}
		}
	} else if !wasLost {
		return say.errAlreadyReleased
	}
	// Every node that may hold something of ours, the spec's rule: now
	// where the acquire answered, and where it has not yet, by its own call
	// once it does (releaseTo): one release per master, none that runs
	// before the grant it is meant to undo.
	if changed {
		c.track.expect(l) // l stays watched: its release is its own write
	}
	rs := c.pool.releaseOn(ctx, l, l.releaseTo(c.pool.nodes), l.timeout, c.pool.settled)
	if changed {
		released := c.pool.count(rs).ok > 0
		c.track.settle(l, released)
		if released && l.kind == kindExclusive {
			c.wakeOwn(l)
		}
	}
	if !changed {
		// A lost lock may still have our key on some node; the release above
		// cleared it, but the lock was not held.
		return say.notHeld("unlock", l.name, l.Err())
	}
	return c.pool.released(l, rs)
}

// extend moves l's lease to ttl on every node (engine: see Lock.Extend).
func (c *core) extend(ctx context.Context, l *hold, ttl time.Duration) error {
	l.io.Lock()
	defer l.io.Unlock()
	if err := l.Err(); err != nil {
		return say.notHeld("extend", l.name, err)
	}
	t1 := time.Now()
	until := validUntil(t1, ttl, l.driftFactor)
	c.track.expect(l)
	rs, interrupted, err := c.pool.extend(ctx, l, ttl, earliest(t1.Add(l.timeout), until))
	c.track.settle(l, true)
	if err != nil {
		return err
	}
	switch t := c.pool.count(rs); {
	case t.ok >= c.pool.quorum && !interrupted && time.Now().Before(until):
		if !c.renewed(l, ttl, until) {
			if l.is(stateLost) {
				c.abandon(l) // lost meanwhile: the moved lease must not keep the name
			}
			return say.notHeld("extend", l.name, l.Err())
		}
		if l.autoRenew {
			c.wd.schedule(l, renewAt(l, t1))
		}
		return nil
	case c.pool.impossible(t.no):
		taken, late := refusalsIn(rs)
		l.lose(refusalReason(t.no, taken, late), nil)
		if t.ok > 0 {
			c.abandon(l) // the masters that moved it must not keep the name
		}
		return say.notHeld("extend", l.name, l.Err())
	default:
		return c.pool.shortOf("extend", l.name, t, " within validity; the lock stays held until its current Until", ctxErrIf(ctx, interrupted))
	}
}

// remaining is l's lease on the server (engine: Lock.TTL).
func (c *core) remaining(ctx context.Context, l *hold) (time.Duration, error) {
	return c.pool.remaining(ctx, l)
}
