package redlockotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/redlockgo/redlock"
	"github.com/redlockgo/redlock/internal/redistest"
	redlockotel "github.com/redlockgo/redlock/otel"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sumOf returns the value of the counter name at the point with attrs.
func sumOf(t *testing.T, rm metricdata.ResourceMetrics, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	want := attribute.NewSet(attrs...)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if dp.Attributes.Equals(&want) {
					return dp.Value
				}
			}
		}
	}
	return 0
}

// countOf returns the number of recordings of histogram name with attrs.
func countOf(t *testing.T, rm metricdata.ResourceMetrics, name string, attrs ...attribute.KeyValue) uint64 {
	t.Helper()
	want := attribute.NewSet(attrs...)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				if dp.Attributes.Equals(&want) {
					return dp.Count
				}
			}
		}
	}
	return 0
}

// TestExport: a lock's life on a real server, exported to a ManualReader
// and a span recorder.
func TestExport(t *testing.T) {
	srv := redistest.Start(t)
	cl := srv.Client(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()); _ = tp.Shutdown(context.Background()) })

	obs, err := redlockotel.New(redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(tp))
	require.NoError(t, err)
	lk, err := redlock.NewLocker(cl, redlock.WithObserver(obs), redlock.WithTTL(3*time.Second), redlock.WithRenewInterval(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { lk.Close() })

	ctx, parent := tp.Tracer("test").Start(context.Background(), "job")
	l, err := lk.TryLock(ctx, "otel-a")
	require.NoError(t, err)
	_, err = lk.TryLock(ctx, "otel-a")
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.NoError(t, l.Unlock(ctx))

	lost, err := lk.TryLock(ctx, "otel-b")
	require.NoError(t, err)
	require.NoError(t, cl.Set(ctx, lost.Key(), "thief", time.Minute).Err())
	select {
	case <-lost.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lock not lost after the theft")
	}
	parent.End()

	// OnLoss runs right after Done closes: wait for its hold span.
	require.Eventually(t, func() bool {
		n := 0
		for _, s := range spans.Ended() {
			if s.Name() == "redlock.hold" {
				n++
			}
		}
		return n == 2
	}, 5*time.Second, 5*time.Millisecond)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := redlockotel.AttrOutcome
	assert.Equal(t, uint64(2), countOf(t, rm, "redlock.acquire.duration", out.String("acquired"), redlockotel.AttrWait.Bool(false)))
	assert.Equal(t, uint64(1), countOf(t, rm, "redlock.acquire.duration", out.String("contended"), redlockotel.AttrWait.Bool(false)))
	assert.Equal(t, int64(1), sumOf(t, rm, "redlock.acquire.contended", redlockotel.AttrWait.Bool(false)))
	assert.Equal(t, int64(1), sumOf(t, rm, "redlock.lost", redlockotel.AttrReason.String("taken")))
	assert.Equal(t, uint64(1), countOf(t, rm, "redlock.hold.duration", out.String("released")))
	assert.Equal(t, uint64(1), countOf(t, rm, "redlock.hold.duration", out.String("lost")))
	assert.Equal(t, int64(1), sumOf(t, rm, "redlock.renewals", redlockotel.AttrManual.Bool(false), out.String("failed")))

	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range spans.Ended() {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	require.Len(t, byName["redlock.acquire"], 3)
	for _, s := range byName["redlock.acquire"] {
		assert.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID(), "acquire span is a child of the caller's")
	}
	assert.Equal(t, codes.Error, byName["redlock.acquire"][1].Status().Code, "the contended TryLock")
	holds := byName["redlock.hold"]
	require.Len(t, holds, 2)
	assert.Equal(t, codes.Unset, holds[0].Status().Code, "released")
	assert.Equal(t, codes.Error, holds[1].Status().Code, "lost")
	assert.Contains(t, holds[1].Attributes(), redlockotel.AttrReason.String("taken"))
}

func TestLockNameAttribute(t *testing.T) {
	srv := redistest.Start(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := redlockotel.New(redlockotel.WithMeterProvider(mp), redlockotel.WithLockName(true))
	require.NoError(t, err)
	lk, err := redlock.NewLocker(srv.Client(t), redlock.WithObserver(obs))
	require.NoError(t, err)
	t.Cleanup(func() { lk.Close() })
	l, err := lk.TryLock(context.Background(), "named")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(context.Background()))
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	assert.Equal(t, uint64(1), countOf(t, rm, "redlock.acquire.duration",
		redlockotel.AttrOutcome.String("acquired"), redlockotel.AttrWait.Bool(false), redlockotel.AttrName.String("named")))
}
