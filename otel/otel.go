// Package redlockotel turns the events of a redlock [redlock.Observer] into
// OpenTelemetry metrics and spans. It lives in a module of its own, so that
// the redlock module itself takes no OpenTelemetry dependency.
//
//	obs, err := redlockotel.New() // global MeterProvider and TracerProvider
//	locker, err := redlock.NewLocker(client, redlock.WithObserver(obs))
//
// Metrics (instrument scope "github.com/redlockgo/redlock/otel"):
//
//	redlock.acquire.duration   histogram, s  every Lock/TryLock/Do acquisition; redlock.outcome, redlock.wait
//	redlock.acquire.wait       histogram, s  time spent waiting for another owner (Lock and Do only)
//	redlock.acquire.contended  counter       acquisitions that found the lock held by another owner
//	redlock.renewals           counter       watchdog renewals and Extend calls; redlock.manual, redlock.outcome (ok, failed)
//	redlock.hold.duration      histogram, s  how long a lock was held, at Unlock or loss; redlock.outcome (released, lost)
//	redlock.lost               counter       locks lost; redlock.loss.reason (expired, taken, deleted, quorum, closed, max_hold)
//	redlock.node.errors        counter       per-node failures; redlock.node, redlock.op (acquire, renew, extend, release)
//
// Spans: "redlock.acquire" for every acquisition, a child of the span in
// the caller's context, with the outcome, attempts and contention; and
// "redlock.hold" from the acquisition to the Unlock or the loss (an error
// span then, with the reason), with one "renew" event per failed renewal.
// Lock names are left out of metric attributes unless [WithLockName] says
// otherwise (they can be unbounded); spans always carry them.
//
// An Observer is safe for concurrent use.
package redlockotel

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/redlockgo/redlock"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/redlockgo/redlock/otel"

// Attribute keys.
const (
	AttrName    = attribute.Key("redlock.name")
	AttrOutcome = attribute.Key("redlock.outcome")
	AttrWait    = attribute.Key("redlock.wait")
	AttrManual  = attribute.Key("redlock.manual")
	AttrReason  = attribute.Key("redlock.loss.reason")
	AttrNode    = attribute.Key("redlock.node")
	AttrOp      = attribute.Key("redlock.op")
)

// Option configures New.
type Option func(*config)

type config struct {
	mp       metric.MeterProvider
	tp       trace.TracerProvider
	lockName bool
}

// WithMeterProvider sets where metrics go. Default otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithTracerProvider sets where spans go. Default otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithLockName adds the lock's name (redlock.name) to metric attributes.
// Default false: names are often unbounded (one per order, per user), and
// each one would be a time series of its own.
func WithLockName(on bool) Option { return func(c *config) { c.lockName = on } }

// Observer is a [redlock.Observer] that records OpenTelemetry metrics and
// spans. Make it with New.
type Observer struct {
	lockName bool
	tracer   trace.Tracer

	acquire   metric.Float64Histogram
	wait      metric.Float64Histogram
	contended metric.Int64Counter
	renewals  metric.Int64Counter
	hold      metric.Float64Histogram
	lost      metric.Int64Counter
	nodeErrs  metric.Int64Counter

	holds sync.Map // *redlock.Lock -> trace.Span: the open "redlock.hold" spans
}

var _ redlock.Observer = (*Observer)(nil)

// New returns an Observer recording with the given providers. It returns
// an error when an instrument cannot be created.
func New(opts ...Option) (*Observer, error) {
	c := config{}
	for _, o := range opts {
		o(&c)
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	m := c.mp.Meter(ScopeName)
	o := &Observer{lockName: c.lockName, tracer: c.tp.Tracer(ScopeName)}
	var err error
	if o.acquire, err = m.Float64Histogram("redlock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of lock acquisitions (Lock, TryLock, Do)")); err != nil {
		return nil, err
	}
	if o.wait, err = m.Float64Histogram("redlock.acquire.wait", metric.WithUnit("s"),
		metric.WithDescription("Time an acquisition waited for another owner")); err != nil {
		return nil, err
	}
	if o.contended, err = m.Int64Counter("redlock.acquire.contended",
		metric.WithDescription("Acquisitions that found the lock held by another owner")); err != nil {
		return nil, err
	}
	if o.renewals, err = m.Int64Counter("redlock.renewals",
		metric.WithDescription("Lease renewals by the watchdog and Extend calls")); err != nil {
		return nil, err
	}
	if o.hold, err = m.Float64Histogram("redlock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("How long locks were held, at Unlock or loss")); err != nil {
		return nil, err
	}
	if o.lost, err = m.Int64Counter("redlock.lost",
		metric.WithDescription("Held locks lost, by reason")); err != nil {
		return nil, err
	}
	if o.nodeErrs, err = m.Int64Counter("redlock.node.errors",
		metric.WithDescription("Calls that failed on one Redis node")); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *Observer) attrs(name string, kv ...attribute.KeyValue) metric.MeasurementOption {
	if o.lockName {
		kv = append(kv, AttrName.String(name))
	}
	return metric.WithAttributes(kv...)
}

// OnAcquire records the acquisition's metrics and its span, and opens the
// hold span of an acquired lock.
func (o *Observer) OnAcquire(e redlock.AcquireEvent) {
	ctx := e.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	ctx = context.WithoutCancel(ctx)
	outcome := e.Outcome.String()
	o.acquire.Record(ctx, e.Duration.Seconds(), o.attrs(e.Name, AttrOutcome.String(outcome), AttrWait.Bool(e.Wait)))
	if e.Wait {
		o.wait.Record(ctx, e.WaitTime.Seconds(), o.attrs(e.Name, AttrOutcome.String(outcome)))
	}
	if e.Contended {
		o.contended.Add(ctx, 1, o.attrs(e.Name, AttrWait.Bool(e.Wait)))
	}
	end := e.Start.Add(e.Duration)
	sctx, span := o.tracer.Start(ctx, "redlock.acquire", trace.WithTimestamp(e.Start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(AttrName.String(e.Name), AttrWait.Bool(e.Wait), AttrOutcome.String(outcome),
			attribute.Int("redlock.attempts", e.Attempts), attribute.Bool("redlock.contended", e.Contended)))
	if e.Err != nil {
		span.RecordError(e.Err, trace.WithTimestamp(end))
		span.SetStatus(codes.Error, outcome)
	}
	span.End(trace.WithTimestamp(end))
	if e.Lock != nil {
		_, hold := o.tracer.Start(sctx, "redlock.hold", trace.WithTimestamp(end),
			trace.WithAttributes(AttrName.String(e.Name), attribute.Int64("redlock.token", e.Lock.Token())))
		o.holds.Store(e.Lock, hold)
	}
}

// OnRenew counts the renewal and notes a failed one on the hold span.
func (o *Observer) OnRenew(e redlock.RenewEvent) {
	outcome := "ok"
	if e.Err != nil {
		outcome = "failed"
		if s, ok := o.holds.Load(e.Lock); ok {
			s.(trace.Span).AddEvent("renew", trace.WithTimestamp(e.Start.Add(e.Duration)),
				trace.WithAttributes(AttrOutcome.String(outcome), AttrManual.Bool(e.Manual), attribute.String("error", e.Err.Error())))
		}
	}
	o.renewals.Add(context.Background(), 1, o.attrs(e.Name, AttrManual.Bool(e.Manual), AttrOutcome.String(outcome)))
}

// OnRelease records the hold time and ends the hold span.
func (o *Observer) OnRelease(e redlock.ReleaseEvent) {
	s, ok := o.holds.LoadAndDelete(e.Lock)
	if !ok {
		return // lost before (OnLoss ended it), or released twice
	}
	o.hold.Record(context.Background(), e.Held.Seconds(), o.attrs(e.Name, AttrOutcome.String("released")))
	span := s.(trace.Span)
	if e.Err != nil {
		span.RecordError(e.Err)
	}
	span.End()
}

// OnLoss counts the loss by reason, records the hold time and ends the hold
// span as an error.
func (o *Observer) OnLoss(e redlock.LossEvent) {
	reason := e.Err.Reason.String()
	o.lost.Add(context.Background(), 1, o.attrs(e.Name, AttrReason.String(reason)))
	s, ok := o.holds.LoadAndDelete(e.Lock)
	if !ok {
		return
	}
	o.hold.Record(context.Background(), e.Held.Seconds(), o.attrs(e.Name, AttrOutcome.String("lost")))
	span := s.(trace.Span)
	span.SetAttributes(AttrReason.String(reason))
	span.RecordError(e.Err)
	span.SetStatus(codes.Error, "lock lost: "+reason)
	span.End()
}

// OnNodeError counts the failure by node and operation.
func (o *Observer) OnNodeError(e redlock.NodeErrorEvent) {
	o.nodeErrs.Add(context.Background(), 1, o.attrs(e.Name, AttrNode.Int(e.Err.Node), AttrOp.String(e.Op)))
}
