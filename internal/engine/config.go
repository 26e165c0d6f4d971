package engine

import (
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/redlockgo/redlock/internal/scripts"
)

// Config holds every tunable; DefaultConfig is the one place defaults live.
type Config struct {
	TTL           time.Duration
	AutoRenew     bool
	RenewInterval time.Duration // 0: ttl/3
	NodeTimeout   time.Duration // 0: derived from ttl, see nodeTimeoutFor
	DriftFactor   float64
	Prefix        string
	Fencing       bool
	Retry         func(attempt int) time.Duration
	RetrySet      bool          // WithRetry was given: its delays bound every wait
	Unanswered    time.Duration // WithUnansweredLimit; 0: no limit
	Logger        *slog.Logger
	MaxHold       time.Duration // 0: no cap
	Observer      Reporter      // nil: none
	Metadata      string        // "": none (WithMetadata)
	Replicas      int           // 0: no WAIT
	AckTimeout    time.Duration // WAIT's timeout when replicas > 0
	Retention     time.Duration // fence counters' life after a grant (WithFenceRetention)
	NoTracking    bool          // WithLossTracking(false)
	Sharded       bool          // every node is a Cluster: publish with SPUBLISH (set by NewCore)
	Announce      bool          // an election's leader: its release is always published (announced)
	ttlBoxed      any           // ttlMillis of the core's TTL, boxed once (see ttlArg)
}

func DefaultConfig() Config {
	return Config{
		TTL:         10 * time.Second,
		AutoRenew:   true,
		DriftFactor: 0.01,
		Prefix:      "redlock:",
		Fencing:     true,
		Retention:   scripts.DefaultFenceRetention,
		Unanswered:  defaultUnansweredLimit,
		Retry:       ExponentialRetry(8*time.Millisecond, 512*time.Millisecond),
		Logger:      slog.New(slog.DiscardHandler),
	}
}

// defaultUnansweredLimit is WithUnansweredLimit's default.
const defaultUnansweredLimit = 10 * time.Second

// MaxMetadata bounds WithMetadata: it travels with every acquisition.
const MaxMetadata = 64 << 10

// WithOptions returns a copy of c with opts (Options) applied and validated.
func WithOptions[O ~func(*Config)](c Config, opts []O) (Config, error) {
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("redlock: nil Option")
		}
		o(&c)
	}
	return c, c.validate()
}

// CallOptions is the config of one call: c itself, shared read-only by
// calls without options, or a copy with opts applied.
func CallOptions[O ~func(*Config)](c *Config, opts []O) (*Config, error) {
	if len(opts) == 0 {
		return c, nil
	}
	own, err := WithOptions(*c, opts)
	if err != nil {
		return nil, err
	}
	return &own, nil
}

// ttlArg is ttlMillis(c.ttl) as a script argument: boxed once for the
// core's TTL, which most acquires send, else boxed per call.
func (c *Config) ttlArg() any {
	if v, ok := c.ttlBoxed.(int64); ok && v == ttlMillis(c.TTL) {
		return c.ttlBoxed
	}
	return ttlMillis(c.TTL)
}

// MaxTTL bounds every lease: far beyond any real critical section, and far
// below where Until's arithmetic (now + TTL) could overflow.
const MaxTTL = 365 * 24 * time.Hour

func (c *Config) validate() error {
	switch {
	case math.IsNaN(c.DriftFactor) || math.IsInf(c.DriftFactor, 0) || math.Signbit(c.DriftFactor) || c.DriftFactor >= 0.5:
		return fmt.Errorf("redlock: drift factor must be in [0, 0.5), got %v", c.DriftFactor)
	case checkTTL(c.TTL, c.DriftFactor) != nil:
		return fmt.Errorf("redlock: %w", checkTTL(c.TTL, c.DriftFactor))
	case c.RenewInterval < 0:
		return fmt.Errorf("redlock: renew interval must be positive, got %v", c.RenewInterval)
	case c.RenewInterval > 0 && c.RenewInterval >= c.TTL-Drift(c.TTL, c.DriftFactor):
		return fmt.Errorf("redlock: renew interval %v must be shorter than TTL %v minus drift %v", c.RenewInterval, c.TTL, Drift(c.TTL, c.DriftFactor))
	case c.NodeTimeout < 0:
		return fmt.Errorf("redlock: node timeout must be positive, got %v", c.NodeTimeout)
	case c.NodeTimeout > MaxTTL:
		return fmt.Errorf("redlock: node timeout must be at most %v, got %v", MaxTTL, c.NodeTimeout)
	case c.Prefix == "" || strings.ContainsAny(c.Prefix, "{}"):
		return fmt.Errorf("redlock: key prefix must be non-empty and free of '{' and '}', got %q", c.Prefix)
	case c.Retry == nil:
		return fmt.Errorf("redlock: nil RetryFunc")
	case len(c.Metadata) > MaxMetadata:
		return fmt.Errorf("redlock: metadata of %d bytes, at most %d", len(c.Metadata), MaxMetadata)
	case c.Retention < time.Second:
		return fmt.Errorf("redlock: fence retention must be at least 1s, got %v", c.Retention)
	case c.Unanswered < 0:
		return fmt.Errorf("redlock: unanswered limit must not be negative, got %v", c.Unanswered)
	case c.MaxHold < 0:
		return fmt.Errorf("redlock: max hold must not be negative, got %v", c.MaxHold)
	case c.Replicas < 0 || c.Replicas > maxReplicaAcks:
		return fmt.Errorf("redlock: replica acks must be in [0, %d], got %d", maxReplicaAcks, c.Replicas)
	case c.AckTimeout < 0 || c.AckTimeout > maxAckTimeout:
		return fmt.Errorf("redlock: replica ack timeout must be in [0, %v], got %v", maxAckTimeout, c.AckTimeout)
	case c.Replicas > 0 && c.AckTimeout < time.Millisecond:
		return fmt.Errorf("redlock: replica ack timeout must be at least 1ms with %d replicas, got %v", c.Replicas, c.AckTimeout)
	case c.Replicas > 0 && c.AckTimeout >= c.TTL:
		return fmt.Errorf("redlock: replica ack timeout %v must be shorter than TTL %v", c.AckTimeout, c.TTL)
	}
	return nil
}

// maxReplicaAcks bounds WithReplicaAcks's replicas: far beyond any real
// deployment, so a larger number is a mistake, not a wish.
const maxReplicaAcks = 1024

// maxAckTimeout bounds WithReplicaAcks's timeout: WAIT is for
// milliseconds, and a lock that waits minutes for a replica is a mistake.
const maxAckTimeout = time.Minute

// WaitLateness is how late Redis (7.0) may answer a WAIT past its timeout:
// blocked clients are timed out by the server's cron, which runs every
// 100ms at the default hz.
const WaitLateness = 100 * time.Millisecond

// Timeout is the per-node call bound for a lease of ttl: the node timeout,
// plus the replica ack timeout and WAIT's lateness when acks are asked for.
func (c *Config) Timeout(ttl time.Duration) time.Duration {
	if c.Replicas > 0 {
		return c.nodeTimeoutFor(ttl) + c.AckTimeout + WaitLateness
	}
	return c.nodeTimeoutFor(ttl)
}

// nodeTimeoutFor is the per-node bound of a call without WAIT.
func (c *Config) nodeTimeoutFor(ttl time.Duration) time.Duration {
	if c.NodeTimeout > 0 {
		return c.NodeTimeout
	}
	return defaultNodeTimeout(ttl)
}

// defaultNodeTimeout is the node timeout for a lease of ttl without
// WithNodeTimeout: a tenth of the TTL, within [100ms, 1s]. release.lua
// derives the same from the lease it is given (internal/scripts/release.lua). No cap
// by the TTL: acquisitions and extensions also stop waiting at the
// validity's end, and a tiny TTL must not leave a budget that a loaded
// machine's scheduling alone can spend.
func defaultNodeTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 100*time.Millisecond), time.Second)
}

func ttlMillis(ttl time.Duration) int64 { return max(ttl.Milliseconds(), 1) }

// ExponentialRetry is ExponentialRetry, as the engine's default.
func ExponentialRetry(lo, hi time.Duration) func(attempt int) time.Duration {
	lo = max(lo, 0)
	hi = max(hi, lo)
	return func(attempt int) time.Duration {
		u := lo
		for i := 0; i <= attempt && u < hi; i++ {
			u *= 2
		}
		u = min(u, hi)
		lower := max(lo, u/2)
		if u <= lower {
			return lower
		}
		return lower + rand.N(u-lower+1)
	}
}
