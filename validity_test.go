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

func containsMonotonic(t time.Time) bool {
	s := t.String()
	for i := 0; i+2 < len(s); i++ {
		if s[i:i+3] == "m=+" {
			return true
		}
	}
	return false
}

func TestExponentialRetry(t *testing.T) {
	f := ExponentialRetry(8*time.Millisecond, 100*time.Millisecond)
	tests := []struct {
		attempt int
		lo, hi  time.Duration // the draw is in [lo, hi)
	}{
		{0, 4 * time.Millisecond, 8 * time.Millisecond},
		{1, 8 * time.Millisecond, 16 * time.Millisecond},
		{3, 32 * time.Millisecond, 64 * time.Millisecond},
		{4, 50 * time.Millisecond, 100 * time.Millisecond},
		{1000, 50 * time.Millisecond, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		for range 100 {
			if d := f(tt.attempt); d < tt.lo || d >= tt.hi {
				t.Fatalf("ExponentialRetry(8ms, 100ms)(%d) = %v, want in [%v, %v)", tt.attempt, d, tt.lo, tt.hi)
			}
		}
	}
	if d := ConstantRetry(7 * time.Millisecond)(9); d != 7*time.Millisecond {
		t.Errorf("ConstantRetry(7ms)(9) = %v, want 7ms", d)
	}
}
