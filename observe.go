package redlock

import (
	"context"
	"time"

	"github.com/redlockgo/redlock/internal/engine"
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
func WithObserver(o Observer) Option { return func(c *config) { c.Observer = observing(o) } }

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

// observing is o as the engine calls it (engine.Reporter), nil for none.
func observing(o Observer) engine.Reporter {
	if o == nil {
		return nil
	}
	return observed{o}
}

// observed turns the engine's reports into o's events.
type observed struct{ o Observer }

func (a observed) Acquired(e engine.AcquireNote) {
	a.o.OnAcquire(AcquireEvent{Ctx: e.Ctx, Name: e.Name, Wait: e.Wait, Start: e.Start, Duration: e.Duration,
		WaitTime: e.WaitTime, Attempts: e.Attempts, Contended: e.Contended, Outcome: AcquireOutcome(e.Outcome),
		Lock: lockOf(e.Hold), Err: e.Err})
}

func (a observed) Renewed(e engine.RenewNote) {
	a.o.OnRenew(RenewEvent{Lock: lockOf(e.Hold), Name: e.Name, Manual: e.Manual, TTL: e.TTL, Start: e.Start,
		Duration: e.Duration, Err: e.Err})
}

func (a observed) Released(e engine.ReleaseNote) {
	a.o.OnRelease(ReleaseEvent{Lock: lockOf(e.Hold), Name: e.Name, Held: e.Held, Duration: e.Duration, Err: e.Err})
}

func (a observed) Lost(e engine.LossNote) {
	le, _ := e.Err.(*LostError)
	a.o.OnLoss(LossEvent{Lock: lockOf(e.Hold), Name: e.Name, Held: e.Held, Err: le})
}

func (a observed) NodeErrors(name, op string, err error) { observeNodes(a.o, name, op, err) }
