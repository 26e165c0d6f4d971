package redlock

import (
	"time"

	"github.com/redlockgo/redlock/internal/engine"
)

// RetryFunc returns how long to wait before attempt number attempt+1 of Lock
// (attempt counts from 0), or a negative duration to give up: Lock then
// returns the last attempt's error, which matches ErrNotObtained (and
// [*TakenError] when another owner held the lock). It must be a pure
// function of its argument: one RetryFunc is shared by every call and
// goroutine.
type RetryFunc func(attempt int) time.Duration

// ExponentialRetry returns a RetryFunc whose waits grow from lo to hi and
// always lie in [lo, hi] (lo is a minimum, as in bsm/redislock's
// ExponentialBackoff). Attempt n draws from [max(lo, u/2), u], u being lo
// doubled n+1 times and clipped to hi: [lo, 2lo], [2lo, 4lo], ... up to
// [max(lo, hi/2), hi]. The jitter spreads contending clients instead of
// retrying in step (the Redlock spec's "random delay"). hi below lo counts
// as lo.
func ExponentialRetry(lo, hi time.Duration) RetryFunc { return engine.ExponentialRetry(lo, hi) }

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
// ErrNotObtained. This is redsync's WithTries(n); bsm/redislock's
// LimitRetry(s, n) counts retries after the first attempt: that is
// [MaxRetries]. A waiter woken by a release message still counts an
// attempt, so n bounds round trips, not time; bound time with the ctx.
func LimitRetry(f RetryFunc, n int) RetryFunc {
	return func(attempt int) time.Duration {
		if attempt+1 >= n {
			return -1
		}
		return f(attempt)
	}
}

// MaxRetries returns a RetryFunc that waits as f says but gives up after n
// retries, that is n+1 attempts in all (n < 0 counts as 0): the reading of
// bsm/redislock's LimitRetry(s, n). MaxRetries(f, n) is LimitRetry(f, n+1).
func MaxRetries(f RetryFunc, n int) RetryFunc { return LimitRetry(f, max(n, 0)+1) }
