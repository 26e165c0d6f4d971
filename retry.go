package redlock

import (
	"math/rand/v2"
	"time"
)

// RetryFunc returns how long to wait before attempt number attempt+1 of Lock
// (attempt counts from 0), or a negative duration to give up: Lock then
// returns the last attempt's error, which matches ErrNotObtained (and
// [*TakenError] when another owner held the lock). It must be a pure
// function of its argument: one RetryFunc is shared by every call and
// goroutine.
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
	return func(int) time.Duration { return max(d, 0) }
}

// LinearBackoff returns a RetryFunc that waits d between attempts: the name
// bsm/redislock gives [ConstantRetry].
func LinearBackoff(d time.Duration) RetryFunc { return ConstantRetry(d) }

// NoRetry returns a RetryFunc that gives up after the first attempt: Lock
// then behaves like TryLock (except that it waits behind goroutines of the
// same Locker already waiting for the name).
func NoRetry() RetryFunc { return LimitRetry(ConstantRetry(0), 1) }

// LimitRetry returns a RetryFunc that waits as f says but gives up after n
// attempts in all (n < 1 counts as 1): Lock then returns an error matching
// ErrNotObtained. A waiter woken by a release message still counts an
// attempt, so n bounds round trips, not time; bound time with the ctx.
func LimitRetry(f RetryFunc, n int) RetryFunc {
	return func(attempt int) time.Duration {
		if attempt+1 >= n {
			return -1
		}
		return f(attempt)
	}
}
