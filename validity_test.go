package redlock

import (
	"testing"
	"time"
)

func TestValidUntil(t *testing.T) {
	t1 := time.Now()
	tests := []struct {
		ttl    time.Duration
		factor float64
		want   time.Duration // Until - t1
	}{
		{10 * time.Second, 0.01, 10*time.Second - 100*time.Millisecond - 2*time.Millisecond},
		{time.Second, 0.01, time.Second - 10*time.Millisecond - 2*time.Millisecond},
		{300 * time.Millisecond, 0.01, 300*time.Millisecond - 3*time.Millisecond - 2*time.Millisecond},
		{time.Second, 0, time.Second - 2*time.Millisecond},
		{100 * time.Millisecond, 0.1, 100*time.Millisecond - 10*time.Millisecond - 2*time.Millisecond},
	}
	for _, tt := range tests {
		got := validUntil(t1, tt.ttl, tt.factor).Sub(t1)
		if got != tt.want {
			t.Errorf("validUntil(t1, %v, %v) - t1 = %v, want %v", tt.ttl, tt.factor, got, tt.want)
		}
	}
	// Validity is measured on the monotonic clock: a wall-clock step between
	// t1 and the check cannot move it.
	if u := validUntil(t1, time.Second, 0.01); !containsMonotonic(u) {
		t.Errorf("validUntil() = %v, want a monotonic reading (m=)", u)
	}
}

func TestExponentialRetry(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		lo, hi  time.Duration
		attempt int
		min     time.Duration // the draw is in [min, max]
		max     time.Duration
	}{
		{8 * ms, 100 * ms, 0, 8 * ms, 16 * ms},
		{8 * ms, 100 * ms, 1, 16 * ms, 32 * ms},
		{8 * ms, 100 * ms, 2, 32 * ms, 64 * ms},
		{8 * ms, 100 * ms, 3, 50 * ms, 100 * ms},
		{8 * ms, 100 * ms, 4, 50 * ms, 100 * ms},
		{8 * ms, 100 * ms, 1000, 50 * ms, 100 * ms},
		// bsm/redislock's reading: the first bound is a minimum.
		{100 * ms, 120 * ms, 0, 100 * ms, 120 * ms},
		{100 * ms, 120 * ms, 5, 100 * ms, 120 * ms},
		{10 * ms, 10 * ms, 3, 10 * ms, 10 * ms},
		{10 * ms, 5 * ms, 3, 10 * ms, 10 * ms},
		{0, 0, 2, 0, 0},
	}
	for _, tt := range tests {
		f := ExponentialRetry(tt.lo, tt.hi)
		for range 300 {
			if d := f(tt.attempt); d < tt.min || d > tt.max {
				t.Fatalf("ExponentialRetry(%v, %v)(%d) = %v, want in [%v, %v]", tt.lo, tt.hi, tt.attempt, d, tt.min, tt.max)
			}
		}
	}
	// Every wait of a long run stays in [lo, hi] (redislock's suite draws
	// 1,800 of them).
	f := ExponentialRetry(20*ms, 200*ms)
	for attempt := range 1800 {
		if d := f(attempt % 12); d < 20*ms || d > 200*ms {
			t.Fatalf("ExponentialRetry(20ms, 200ms)(%d) = %v, want in [20ms, 200ms]", attempt%12, d)
		}
	}
	if d := ConstantRetry(7 * time.Millisecond)(9); d != 7*time.Millisecond {
		t.Errorf("ConstantRetry(7ms)(9) = %v, want 7ms", d)
	}
}
