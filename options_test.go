package redlock

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
)

// TestOptionValuesRejected: every non-finite or out-of-range option value
// is refused, at construction and per call, and Extend refuses bad TTLs.
func TestOptionValuesRejected(t *testing.T) {
	t.Parallel()
	cl, _ := miniClient(t)
	bad := map[string]Option{
		"drift NaN":          WithDriftFactor(math.NaN()),
		"drift +Inf":         WithDriftFactor(math.Inf(1)),
		"drift -Inf":         WithDriftFactor(math.Inf(-1)),
		"drift -0":           WithDriftFactor(math.Copysign(0, -1)),
		"drift 0.5":          WithDriftFactor(0.5),
		"TTL max int64":      WithTTL(math.MaxInt64),
		"TTL over a year":    WithTTL(engine.MaxTTL + time.Millisecond),
		"TTL zero":           WithTTL(0),
		"TTL negative":       WithTTL(-time.Second),
		"TTL sub-ms":         WithTTL(500 * time.Microsecond),
		"renew negative":     WithRenewInterval(-1),
		"renew >= validity":  WithRenewInterval(10 * time.Second),
		"node timeout < 0":   WithNodeTimeout(-1),
		"node timeout huge":  WithNodeTimeout(math.MaxInt64),
		"empty prefix":       WithKeyPrefix(""),
		"brace prefix":       WithKeyPrefix("a{"),
		"nil retry function": WithRetry(nil),
	}
	lk := newLocker(t, cl)
	for name, opt := range bad {
		t.Run(name, func(t *testing.T) {
			_, err := NewLocker(cl, opt)
			assert.Error(t, err, "NewLocker()")
			_, err = lk.TryLock(context.Background(), "opts", opt)
			assert.Error(t, err, "TryLock()")
			assert.NotErrorIs(t, err, ErrNotObtained, "a bad option is not a contended lock")
		})
	}
	l, err := lk.TryLock(context.Background(), "opts")
	require.NoError(t, err)
	for _, ttl := range []time.Duration{0, -1, time.Microsecond, engine.MaxTTL + 1, math.MaxInt64} {
		assert.Error(t, l.Extend(context.Background(), ttl), "Extend(%v)", ttl)
	}
	assert.NoError(t, l.Err(), "a refused Extend leaves the lock held")
}

func TestReplicaAcksOptionValidation(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	cl := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = cl.Close() })
	tests := []struct {
		name    string
		opts    []Option
		wantErr string
	}{
		{"off", []Option{WithReplicaAcks(0, 0)}, ""},
		{"one", []Option{WithReplicaAcks(1, 200*time.Millisecond)}, ""},
		{"negative replicas", []Option{WithReplicaAcks(-1, time.Second)}, "replica acks must be in [0, 1024], got -1"},
		{"absurd replicas", []Option{WithReplicaAcks(100000, time.Second)}, "replica acks must be in [0, 1024], got 100000"},
		{"no timeout", []Option{WithReplicaAcks(1, 0)}, "replica ack timeout must be at least 1ms"},
		{"sub-millisecond timeout", []Option{WithReplicaAcks(1, 500*time.Microsecond)}, "replica ack timeout must be at least 1ms"},
		{"negative timeout", []Option{WithReplicaAcks(0, -time.Second)}, "replica ack timeout must be in [0, 1m0s], got -1s"},
		{"absurd timeout", []Option{WithTTL(time.Hour), WithReplicaAcks(1, 2*time.Minute)}, "replica ack timeout must be in [0, 1m0s], got 2m0s"},
		{"timeout not below TTL", []Option{WithTTL(time.Second), WithReplicaAcks(1, time.Second)}, "replica ack timeout 1s must be shorter than TTL 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lk, err := NewLocker(cl, tt.opts...)
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.NoError(t, lk.Close())
				return
			}
			require.Error(t, err, "NewLocker")
			assert.Contains(t, err.Error(), tt.wantErr)
			// The same per call.
			lk, err = NewLocker(cl)
			require.NoError(t, err)
			defer func() { require.NoError(t, lk.Close()) }()
			l, err := lk.TryLock(context.Background(), "acks-"+tt.name, tt.opts...)
			require.Error(t, err, "TryLock")
			assert.Nil(t, l)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestReplicaAcksTimeoutBudget(t *testing.T) {
	t.Parallel()
	c := engine.DefaultConfig()
	base := c.Timeout(c.TTL)
	c.Replicas, c.AckTimeout = 1, 250*time.Millisecond
	assert.Equal(t, base+250*time.Millisecond+engine.WaitLateness, c.Timeout(c.TTL), "per-node bound with acks")
}

// TestFenceRetentionBadInput: a retention below 1s is refused.
func TestFenceRetentionBadInput(t *testing.T) {
	t.Parallel()
	cl, _ := miniClient(t)
	for _, d := range []time.Duration{0, -time.Hour, time.Second - 1} {
		_, err := NewLocker(cl, WithFenceRetention(d))
		assert.Error(t, err, "NewLocker(WithFenceRetention(%v))", d)
	}
}

func TestWithMaxHoldRejectsNegative(t *testing.T) {
	t.Parallel()
	cl, _ := miniClient(t)
	_, err := NewLocker(cl, WithMaxHold(-time.Second))
	require.Error(t, err)
}
