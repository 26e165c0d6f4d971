package redlock

import (
	"math/rand/v2"
	"time"
)

// RetryFunc returns how long to wait before attempt number attempt+1 of Lock
// (attempt counts from 0). It must be a pure function of its argument: one
// RetryFunc is shared by every call and goroutine.
type RetryFunc func(attempt int) time.Duration

// ExponentialRetry returns a RetryFunc that doubles the wait from lo up to hi,
// with jitter: each wait is drawn from [d/2, d), so that contending clients
// spread out instead of retrying in step (the Redlock spec's "random delay").
func ExponentialRetry(lo, hi time.Duration) RetryFunc {
	return func(attempt int) time.Duration {
		d := lo
		for i := 0; i < attempt && d < hi; i++ {
			d *= 2
		}
		d = min(d, hi)
		if d <= 1 {
			return d
		}
		return d/2 + rand.N(d/2)
	}
}

// ConstantRetry returns a RetryFunc that always waits d.
func ConstantRetry(d time.Duration) RetryFunc {
	return func(int) time.Duration { return d }
}
