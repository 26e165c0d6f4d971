package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
)

type lockState int

const (
	stateAcquiring lockState = iota // an attempt in flight; never seen by users
	stateHeld
	stateLost
	stateReleased
	stateFailed // the attempt that made it did not obtain the lock
)

// Lock is a held lock: the handle one successful Lock, TryLock or Do returns.
// Its identity (name, owner value, fencing token) never changes; a new
// acquisition always returns a new Lock with a fresh owner value, so a stale
// handle can never release or extend a later holder's lock.
//
// A Lock is safe for concurrent use by multiple goroutines. Exactly one of
// several concurrent Unlock calls returns nil.
type Lock struct {
	c             *core
	name          string
	owner         string
	keys          []string // lock key, fence counter key: one hash tag
	channel       string   // where releases are published (wait.go)
	fencing       bool
	autoRenew     bool
	driftFactor   float64
	renewInterval time.Duration
	timeout       time.Duration
	logger        *slog.Logger
	done          chan struct{}
	token         int64 // set once, before the Lock is returned

	// io serialises Extend with the watchdog's renewal of this lock, so the
	// validity recorded locally always belongs to the last lease sent.
	io sync.Mutex

	mu    sync.Mutex
	state lockState
	// outcome[i] is what node i's acquire call returned, or pending while it
	// is in flight. A call that returns after the lock stopped being live
	// releases its own grant (see settle).
	outcome []outcome
	why     string
	ttl     time.Duration
	until   time.Time
	timer   *time.Timer
	onLost  []func()

	// Guarded by the watchdog's mutex.
	wdIndex int
	wdAt    time.Time
}

func (c *core) newLock(name string, cfg *config) *Lock {
	tag := lockKey(cfg.prefix, name)
	return &Lock{
		c:             c,
		name:          name,
		owner:         uuid.NewString(),
		keys:          []string{tag, tag + ":fence"},
		channel:       releaseChannel(tag),
		fencing:       cfg.fencing,
		autoRenew:     cfg.autoRenew,
		driftFactor:   cfg.driftFactor,
		renewInterval: cfg.renewInterval,
		timeout:       cfg.timeout(cfg.ttl),
		logger:        cfg.logger,
		done:          make(chan struct{}),
		ttl:           cfg.ttl,
		outcome:       make([]outcome, len(c.nodes)),
		wdIndex:       -1,
	}
}

// outcome is how one node answered a lock's acquire call.
type outcome uint8

const (
	pending outcome = iota // no reply yet
	granted
	taken  // another owner holds it: nothing of ours there
	failed // an error: the script may or may not have run
)

// Name returns the lock's name as given to the acquire call.
func (l *Lock) Name() string { return l.name }

// Owner returns the random owner value (a UUID) stored in Redis under the
// lock's key while it is held.
func (l *Lock) Owner() string { return l.owner }

// Token returns the lock's fencing token: strictly increasing across
// acquisitions of one name, and >= 1. Pass it to a [Fence] or [RedisFence]
// guarding the resource. It is 0 when fencing is off ([WithFencing]).
func (l *Lock) Token() int64 { return l.token }

// Until returns the end of the lock's local validity: the instant read before
// the last successful acquire, extend or renewal was sent, plus its TTL,
// minus the drift allowance. No other owner can be granted the name before
// it. The value carries a monotonic clock reading; compare it with time.Now
// or time.Until, not after serialising it.
func (l *Lock) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Done returns a channel closed once the lock is no longer held: after
// Unlock, or when it is lost. A local timer closes it 1ms before Until,
// whatever a hung request is doing, so it closes by Until unless the timer
// fires more than 1ms late (a heavily loaded machine); even then the drift
// allowance lies between Until and the earliest moment the server can grant
// the name to anyone else.
func (l *Lock) Done() <-chan struct{} { return l.done }

// Err returns nil while the lock is held, an error matching ErrLost once it
// was lost, and ErrReleased after Unlock or Close.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case stateHeld, stateAcquiring:
		return nil
	case stateLost:
		return fmt.Errorf("%w: %s", ErrLost, l.why)
	default:
		return ErrReleased
	}
}

// Unlock releases the lock on every node where it is still ours; another
// owner's key is never touched. It stops renewal and closes Done before
// sending anything. It returns nil once a quorum of nodes (the one node of a
// Locker) released it, without waiting for nodes that do not answer. It
// returns an error matching ErrNotHeld when the lock was already released,
// was lost, or the nodes say it is no longer ours; any other error means the
// outcome is unknown on too many nodes and the lock frees itself when its TTL
// runs out. Cancelling ctx does not stop the release: it runs detached from
// ctx, bounded by the node timeout, so a cancelled caller still unlocks.
func (l *Lock) Unlock(ctx context.Context) error {
	l.mu.Lock()
	prev := l.state
	changed := l.transition(stateReleased, "")
	l.mu.Unlock()
	if changed {
		l.afterTransition(stateReleased)
	} else if prev != stateLost {
		return fmt.Errorf("%w: already released", ErrNotHeld)
	}
	c := l.c
	// Every node, the spec's rule: also those whose acquire has not answered
	// yet. The release usually overtakes nothing and frees the name at once;
	// if it does overtake the acquire, the acquire's call releases its own
	// grant when it arrives (settle).
	rs := c.releaseOn(ctx, l, c.nodes, l.timeout, func(rs []reply) bool {
		t := c.count(rs)
		return t.ok >= c.quorum || c.impossible(t.no+t.failed)
	})
	if !changed {
		// A lost lock may still have our key on some node; the release above
		// cleared it, but the lock was not held.
		return fmt.Errorf("%w: %w", ErrNotHeld, ErrLost)
	}
	t := c.count(rs)
	switch {
	case t.ok >= c.quorum:
		return nil
	case c.impossible(t.no):
		return ErrNotHeld
	}
	return errors.Join(append([]error{fmt.Errorf("redlock: release reached %d of %d nodes, need %d", t.ok, len(c.nodes), c.quorum)}, t.errs...)...)
}

// Extend sets the lock's lease to ttl from now on every node where it is
// still ours, and moves Until accordingly; later renewals use ttl too. It
// never re-creates an expired key. It succeeds only when a quorum of nodes
// (the one node of a Locker) extended within the new validity. It returns an
// error matching ErrNotHeld when the lock is no longer held (the lock is then
// marked lost), and another error when too many nodes failed to answer, in
// which case the lock stays held until its current Until.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl <= 0 || drift(ttl, l.driftFactor) >= ttl {
		return fmt.Errorf("redlock: Extend TTL %v leaves no validity after the drift allowance", ttl)
	}
	l.io.Lock()
	defer l.io.Unlock()
	if err := l.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	c := l.c
	t1 := time.Now()
	until := validUntil(t1, ttl, l.driftFactor)
	ch, err := c.fanOut(ctx, c.nodes, l.timeout, l.timeout, func(ctx context.Context, n *node) reply {
		v, err := scriptExtend.Run(ctx, n.client, l.keys[:1], l.owner, ttlMillis(ttl)).Int64()
		return reply{ok: v == 1, err: err}
	})
	if err != nil {
		return err
	}
	rs, interrupted := gather(ch, c.nodes, earliest(t1.Add(l.timeout), until), ctx.Done(), func(rs []reply) bool {
		t := c.count(rs)
		return t.ok >= c.quorum || c.impossible(t.no+t.failed)
	})
	t := c.count(rs)
	switch {
	case t.ok >= c.quorum && !interrupted && time.Now().Before(until):
		if !l.renewed(ttl, until) {
			return fmt.Errorf("%w: %w", ErrNotHeld, l.Err())
		}
		if l.autoRenew {
			c.wd.schedule(l, l.renewAt(t1))
		}
		return nil
	case c.impossible(t.no):
		l.finish(stateLost, "extend found the key gone or owned by another owner")
		return ErrNotHeld
	}
	errs := append([]error{fmt.Errorf("redlock: extend reached %d of %d nodes within validity, need %d", t.ok, len(c.nodes), c.quorum)}, t.errs...)
	if interrupted {
		errs = append(errs, ctx.Err())
	}
	return errors.Join(errs...)
}

// settle records that node's acquire call returned, and reports whether its
// goroutine must release what it may have set: a grant, or an error whose
// outcome is unknown, that arrived after the lock stopped being live. Unlock
// and failed attempts change the state before they send their releases, so
// a grant their release overtook is still released, by this call.
func (l *Lock) settle(node int, o outcome) (release bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.outcome[node] = o
	return o != taken && l.state != stateAcquiring && l.state != stateHeld
}

// settled returns the nodes whose acquire call answered one of outcomes;
// l.mu held.
func (l *Lock) settled(outcomes ...outcome) []*node {
	var out []*node
	for _, n := range l.c.nodes {
		if slices.Contains(outcomes, l.outcome[n.idx]) {
			out = append(out, n)
		}
	}
	return out
}

// hold makes a granted attempt a held lock and arms the loss timer.
func (l *Lock) hold(token int64, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.token = token
	l.state = stateHeld
	l.until = until
	l.timer = time.AfterFunc(untilLoss(until), l.expire)
}

// timerLead is how long before Until the loss timer is set to fire, so that
// Done closes by Until although a timer fires a little late.
const timerLead = time.Millisecond

// untilLoss is how long from now the loss timer of a lock valid until u fires.
func untilLoss(u time.Time) time.Duration { return time.Until(u) - timerLead }

// expire runs from the loss timer, just before Until.
func (l *Lock) expire() {
	l.mu.Lock()
	if l.state != stateHeld {
		l.mu.Unlock()
		return
	}
	if d := untilLoss(l.until); d > 0 {
		// A renewal moved Until while this call was on its way.
		l.timer.Reset(d)
		l.mu.Unlock()
		return
	}
	why := "no renewal succeeded before the validity ran out"
	if !l.autoRenew {
		why = "lease ran out (auto-renew off)"
	}
	changed := l.transition(stateLost, why)
	l.mu.Unlock()
	if changed {
		l.afterTransition(stateLost)
	}
}

// renewed records a successful extension; false if the lock is gone.
func (l *Lock) renewed(ttl time.Duration, until time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateHeld {
		return false
	}
	l.ttl = ttl
	l.until = until
	l.timer.Reset(untilLoss(until))
	return true
}

func (l *Lock) leaseTTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// renewEvery is the watchdog period for the current lease.
func (l *Lock) renewEvery() time.Duration {
	ttl := l.leaseTTL()
	if l.renewInterval > 0 && l.renewInterval < ttl {
		return l.renewInterval
	}
	return ttl / 3
}

// renewAt is when the watchdog should next renew a lease sent at t1.
func (l *Lock) renewAt(t1 time.Time) time.Time { return t1.Add(l.renewEvery()) }

func (l *Lock) held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == stateHeld
}

// finish moves a held (or acquiring) lock to a final state.
func (l *Lock) finish(to lockState, why string) bool {
	l.mu.Lock()
	changed := l.transition(to, why)
	l.mu.Unlock()
	if changed {
		l.afterTransition(to)
	}
	return changed
}

// transition changes the state under l.mu; afterTransition must follow
// outside it when it returns true.
func (l *Lock) transition(to lockState, why string) bool {
	if l.state != stateHeld && l.state != stateAcquiring {
		return false
	}
	l.state = to
	l.why = why
	if l.timer != nil {
		l.timer.Stop()
	}
	close(l.done)
	return true
}

func (l *Lock) afterTransition(to lockState) {
	l.c.forget(l)
	if to != stateLost {
		return
	}
	l.logger.Warn("redlock: lock lost", "name", l.name, "token", l.token, "reason", l.why)
	l.mu.Lock()
	fns := l.onLost
	l.onLost = nil
	l.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

// onLoss runs f once if the lock is lost (at once if it already was).
func (l *Lock) onLoss(f func()) {
	l.mu.Lock()
	switch l.state {
	case stateHeld:
		l.onLost = append(l.onLost, f)
		l.mu.Unlock()
	case stateLost:
		l.mu.Unlock()
		f()
	default:
		l.mu.Unlock()
	}
}
