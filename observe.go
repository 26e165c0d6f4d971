package redlock

import (
	"context"
	"errors"
	"time"
)

// Observer receives what happens to locks: acquisitions (latency, wait,
// contention, outcome), renewals and Extend calls, releases, losses with
// their reason, and per-node failures. Set one with [WithObserver]; the
// adapter in the module github.com/redlockgo/redlock/otel turns the events
// into OpenTelemetry metrics and spans.
//
// The library calls an Observer synchronously from its own goroutines (the
// caller's for acquire, Extend, Unlock and Close; the watchdog's for
// renewals; the loss clock's for losses by time), so implementations must be safe for concurrent
// use, return quickly and never block; they must not call back into the
// Lock, Locker or Redlock that reported the event. Embed [NopObserver] to
// implement only some methods. Without an Observer the library builds no
// event and allocates nothing for them.
type Observer interface {
	// OnAcquire reports the end of every Lock, TryLock, and Do's
	// acquisition.
	OnAcquire(AcquireEvent)
	// OnRenew reports every renewal by the watchdog and every Extend.
	OnRenew(RenewEvent)
	// OnRelease reports every Unlock call.
	OnRelease(ReleaseEvent)
	// OnLoss reports a held lock lost, once, when Done closes; Close of the
	// Locker counts, with reason LossClosed.
	OnLoss(LossEvent)
	// OnNodeError reports a node that failed one call (an error or no reply
	// in time; a node that answered "held by another owner" or "not ours" is
	// not an error). A Redlock reports each failing master; a Locker its one
	// node.
	OnNodeError(NodeErrorEvent)
}

// NopObserver implements Observer by doing nothing; embed it in an observer
// that implements only some methods.
type NopObserver struct{}

func (NopObserver) OnAcquire(AcquireEvent)     {}
func (NopObserver) OnRenew(RenewEvent)         {}
func (NopObserver) OnRelease(ReleaseEvent)     {}
func (NopObserver) OnLoss(LossEvent)           {}
func (NopObserver) OnNodeError(NodeErrorEvent) {}

// WithObserver sets the Observer of acquisitions, renewals, releases, losses
// and node failures. Default none; nil removes it. Set on the constructor
// it sees every call; set per call it sees that call's lock.
func WithObserver(o Observer) Option { return func(c *config) { c.observer = o } }

// AcquireOutcome classifies how an acquire call ended.
type AcquireOutcome uint8

const (
	// Acquired: the call returned a held lock.
	Acquired AcquireOutcome = iota + 1
	// Contended: another owner held the lock (TryLock, or Lock whose retry
	// policy gave up); the error matches ErrNotObtained and [*TakenError].
	Contended
	// Canceled: the caller's context ended first.
	Canceled
	// Failed: any other error (nodes unreachable, refusals, Close).
	Failed
)

func (o AcquireOutcome) String() string {
	switch o {
	case Acquired:
		return "acquired"
	case Contended:
		return "contended"
	case Canceled:
		return "canceled"
	case Failed:
		return "failed"
	}
	return "unknown"
}

// AcquireEvent is one acquire call: Lock, TryLock, or the acquisition of Do.
type AcquireEvent struct {
	// Ctx is the caller's context, so an observer can parent a span on it.
	// It may already be cancelled.
	Ctx context.Context
	// Name is the lock's name; Wait is true for Lock and Do, false for
	// TryLock.
	Name string
	Wait bool
	// Start is when the call began; Duration how long it took in all.
	Start    time.Time
	Duration time.Duration
	// WaitTime is the part of Duration after the first attempt that did
	// not get the lock: time spent waiting for another owner (0 when the
	// first attempt decided).
	WaitTime time.Duration
	// Attempts counts acquire round trips (a lock handed over by an Unlock
	// of the same Locker costs none).
	Attempts int
	// Contended reports that some attempt found the lock held by another
	// owner.
	Contended bool
	Outcome   AcquireOutcome
	// Lock is the acquired lock, nil otherwise; Err the call's error.
	Lock *Lock
	Err  error
}

// RenewEvent is one renewal of a held lock by the watchdog (Manual false)
// or one Extend call (Manual true).
type RenewEvent struct {
	Lock   *Lock
	Name   string
	Manual bool
	// TTL is the lease asked for; Start and Duration time the call.
	TTL      time.Duration
	Start    time.Time
	Duration time.Duration
	// Err is nil when the lease was moved. For a watchdog renewal that
	// will be retried it is the nodes' errors; when the nodes said the lock
	// is no longer ours it is the [LossReason], and OnLoss follows. For
	// Extend it is what Extend returned (an Extend that finds the lock lost
	// reports OnLoss first).
	Err error
}

// ReleaseEvent is one Unlock call.
type ReleaseEvent struct {
	Lock *Lock
	Name string
	// Held is how long the lock was held, up to this call.
	Held time.Duration
	// Duration is how long the Unlock call took; Err is what it returned.
	Duration time.Duration
	Err      error
}

// LossEvent is a held lock lost.
type LossEvent struct {
	Lock *Lock
	Name string
	// Held is how long the lock was held, up to the loss.
	Held time.Duration
	// Err is what [Lock.Err] returns: its Reason says why.
	Err *LostError
}

// NodeErrorEvent is one node's failure in one call.
type NodeErrorEvent struct {
	Name string
	// Op is "acquire", "renew", "extend" or "release".
	Op  string
	Err *NodeError
}

// Operations named in NodeErrorEvent.Op.
const (
	opAcquire = "acquire"
	opRenew   = "renew"
	opExtend  = "extend"
	opRelease = "release"
)

// acquireTrace follows one acquire call for the observer; nil (and every
// method a no-op) when there is none, so an unobserved call pays nothing.
type acquireTrace struct {
	obs       Observer
	ctx       context.Context
	name      string
	wait      bool
	start     time.Time
	refused   time.Time // end of the first attempt that did not get the lock
	attempts  int
	contended bool
}

func newAcquireTrace(ctx context.Context, cfg *config, name string, wait bool) *acquireTrace {
	if cfg.observer == nil {
		return nil
	}
	return &acquireTrace{obs: cfg.observer, ctx: ctx, name: name, wait: wait, start: time.Now()}
}

// attempted records one acquire round trip and its error.
func (tr *acquireTrace) attempted(err error) {
	if tr == nil {
		return
	}
	tr.attempts++
	if err != nil {
		if tr.refused.IsZero() {
			tr.refused = time.Now()
		}
		var te *TakenError
		tr.contended = tr.contended || errors.As(err, &te)
	}
}

// done reports the call's end.
func (tr *acquireTrace) done(l *Lock, err error) {
	if tr == nil {
		return
	}
	end := time.Now()
	ev := AcquireEvent{
		Ctx: tr.ctx, Name: tr.name, Wait: tr.wait, Start: tr.start, Duration: end.Sub(tr.start),
		Attempts: tr.attempts, Contended: tr.contended, Lock: l, Err: err,
	}
	if tr.wait && !tr.refused.IsZero() {
		ev.WaitTime = end.Sub(tr.refused)
	}
	var te *TakenError
	switch {
	case err == nil:
		ev.Outcome = Acquired
	case tr.ctx.Err() != nil:
		// The caller's ctx ended. A node call's own deadline (a NodeError
		// wrapping DeadlineExceeded) is a failure, not a cancellation.
		ev.Outcome = Canceled
	case errors.As(err, &te):
		ev.Outcome, ev.Contended = Contended, true
	default:
		ev.Outcome = Failed
	}
	tr.obs.OnAcquire(ev)
}

// observeNodes reports the NodeErrors in errs (joined or not) to obs.
func observeNodes(obs Observer, name, op string, errs ...error) {
	if obs == nil {
		return
	}
	for _, err := range errs {
		eachNodeError(err, func(ne *NodeError) {
			if !errors.Is(ne.Err, errTaken) {
				obs.OnNodeError(NodeErrorEvent{Name: name, Op: op, Err: ne})
			}
		})
	}
}

// eachNodeError calls f for every NodeError in err's tree.
func eachNodeError(err error, f func(*NodeError)) {
	switch e := err.(type) {
	case nil:
	case *NodeError:
		f(e)
	case interface{ Unwrap() []error }:
		for _, err := range e.Unwrap() {
			eachNodeError(err, f)
		}
	case interface{ Unwrap() error }:
		eachNodeError(e.Unwrap(), f)
	}
}

// observeRenew reports one renewal or Extend of l, whose outcome is err
// and whose failing nodes are in nodeErrs.
func (l *Lock) observeRenew(manual bool, ttl time.Duration, start time.Time, err, nodeErrs error) {
	op := opRenew
	if manual {
		op = opExtend
	}
	observeNodes(l.obs, l.name, op, nodeErrs)
	l.obs.OnRenew(RenewEvent{Lock: l, Name: l.name, Manual: manual, TTL: ttl, Start: start, Duration: time.Since(start), Err: err})
}

// heldFor is how long l has been held, up to its end if it ended.
func (l *Lock) heldFor() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ended.IsZero() {
		return l.ended.Sub(l.acquired)
	}
	return time.Since(l.acquired)
}
