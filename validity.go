package redlock

import "time"

// drift is the Redlock spec's allowance for clock drift between processes:
// ttl*factor, plus 2ms for Redis's expiry precision (0-1ms) and rounding.
func drift(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + 2*time.Millisecond
}

// validUntil is the end of local validity of a lease of ttl requested at t1:
// t1 + ttl - drift. t1 must be read from the monotonic clock (time.Now)
// immediately before the first request is sent: every key the request sets
// expires no earlier than t1 + ttl on the server, so no other owner can be
// granted the name before the returned instant. This is the spec's
// TTL - (T2-T1) - drift in absolute form; acquire, extend and renew all use it,
// and the caller checks time.Now() against it as the last step, after every
// round trip, so a pause anywhere before the return is caught.
func validUntil(t1 time.Time, ttl time.Duration, factor float64) time.Time {
	// The server gets whole milliseconds (ttlMillis): count no more.
	ttl = max(ttl.Truncate(time.Millisecond), time.Millisecond)
	return t1.Add(ttl - drift(ttl, factor))
}
