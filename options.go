package redlock

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Option configures a Locker or Redlock. Given to the constructor it sets the
// default for every call; given to Lock, TryLock or Do it overrides that
// default for the one call.
type Option func(*config)

// config holds every tunable; defaultConfig is the one place defaults live.
type config struct {
	ttl           time.Duration
	autoRenew     bool
	renewInterval time.Duration // 0: ttl/3
	nodeTimeout   time.Duration // 0: derived from ttl, see nodeTimeoutFor
	driftFactor   float64
	prefix        string
	fencing       bool
	retry         RetryFunc
	logger        *slog.Logger
}

func defaultConfig() config {
	return config{
		ttl:         10 * time.Second,
		autoRenew:   true,
		driftFactor: 0.01,
		prefix:      "redlock:",
		fencing:     true,
		retry:       ExponentialRetry(8*time.Millisecond, 512*time.Millisecond),
		logger:      slog.New(slog.DiscardHandler),
	}
}

// WithTTL sets the lease length of a lock on the server. Default 10s. With
// auto-renew on, a crashed holder's lock is free again at most one TTL after
// its last renewal; with it off, the lock is held for exactly one TTL unless
// extended.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithAutoRenew turns the watchdog on or off. Default true: a held lock is
// renewed every renew interval (TTL/3 unless [WithRenewInterval] says
// otherwise) until it is unlocked or lost.
func WithAutoRenew(on bool) Option { return func(c *config) { c.autoRenew = on } }

// WithRenewInterval sets how often the watchdog renews a held lock. Default
// TTL/3. It must be shorter than the TTL minus the clock drift allowance.
func WithRenewInterval(d time.Duration) Option { return func(c *config) { c.renewInterval = d } }

// WithNodeTimeout bounds every call to one Redis node (acquire, extend,
// release), enforced by the library whatever the client's own timeouts. Default
// TTL/50, kept between 50ms and 500ms and at most TTL/3. A Redlock treats a node
// that has not answered by then as failed for that call.
func WithNodeTimeout(d time.Duration) Option { return func(c *config) { c.nodeTimeout = d } }

// WithDriftFactor sets the share of the TTL subtracted from a lock's validity
// for clock drift between processes; 2ms for Redis's expiry precision are
// always subtracted on top. Default 0.01. It must be in [0, 0.5).
func WithDriftFactor(f float64) Option { return func(c *config) { c.driftFactor = f } }

// WithKeyPrefix sets the prefix of the keys the library writes. Default
// "redlock:". A lock named n lives at "{<prefix>n}" and its fencing counter at
// "{<prefix>n}:fence". The prefix must be non-empty and contain no '{' or '}',
// so the hash tag of both keys is never empty and they share one Cluster slot.
func WithKeyPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithFencing turns fencing tokens on or off. Default true: every acquisition
// mints a token, and a per-name counter key that never expires is kept
// (one small key per lock name ever used; delete it only when the name is
// retired). With fencing off no counter is written and [Lock.Token] is 0.
func WithFencing(on bool) Option { return func(c *config) { c.fencing = on } }

// WithRetry sets how long Lock waits between attempts on a contended lock
// when it cannot rely on release messages: before its subscription is
// confirmed and while the pub/sub connection is down. Default
// ExponentialRetry(8ms, 512ms). Whatever the policy says, a waiter never
// sleeps past the moment the holder's lease would expire.
func WithRetry(f RetryFunc) Option { return func(c *config) { c.retry = f } }

// WithLogger sets where renewal failures and lost locks are logged. Default:
// nowhere. The library logs nothing else.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		c.logger = l
	}
}

// with returns a copy of c with opts applied and validated.
func (c config) with(opts []Option) (config, error) {
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("redlock: nil Option")
		}
		o(&c)
	}
	return c, c.validate()
}

func (c *config) validate() error {
	switch {
	case c.ttl <= 0:
		return fmt.Errorf("redlock: TTL must be positive, got %v", c.ttl)
	case c.driftFactor < 0 || c.driftFactor >= 0.5:
		return fmt.Errorf("redlock: drift factor must be in [0, 0.5), got %v", c.driftFactor)
	case drift(c.ttl, c.driftFactor) >= c.ttl:
		return fmt.Errorf("redlock: TTL %v leaves no validity after the drift allowance of %v", c.ttl, drift(c.ttl, c.driftFactor))
	case c.renewInterval < 0:
		return fmt.Errorf("redlock: renew interval must be positive, got %v", c.renewInterval)
	case c.renewInterval > 0 && c.renewInterval >= c.ttl-drift(c.ttl, c.driftFactor):
		return fmt.Errorf("redlock: renew interval %v must be shorter than TTL %v minus drift %v", c.renewInterval, c.ttl, drift(c.ttl, c.driftFactor))
	case c.nodeTimeout < 0:
		return fmt.Errorf("redlock: node timeout must be positive, got %v", c.nodeTimeout)
	case c.prefix == "" || strings.ContainsAny(c.prefix, "{}"):
		return fmt.Errorf("redlock: key prefix must be non-empty and free of '{' and '}', got %q", c.prefix)
	case c.retry == nil:
		return fmt.Errorf("redlock: nil RetryFunc")
	}
	return nil
}

// timeout is the per-node call bound for a lease of ttl.
func (c *config) timeout(ttl time.Duration) time.Duration {
	if c.nodeTimeout > 0 {
		return c.nodeTimeout
	}
	d := min(max(ttl/50, 50*time.Millisecond), 500*time.Millisecond)
	return min(d, ttl/3)
}
