package redlock

import (
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/redlockgo/redlock/internal/scripts"
)

// config holds every tunable; defaultConfig is the one place defaults live.
type config struct {
	ttl           time.Duration
	autoRenew     bool
	renewInterval time.Duration // 0: ttl/3
	nodeTimeout   time.Duration // 0: derived from ttl, see nodeTimeoutFor
	driftFactor   float64
	prefix        string
	fencing       bool
	retry         func(attempt int) time.Duration
	retrySet      bool          // WithRetry was given: its delays bound every wait
	unanswered    time.Duration // WithUnansweredLimit; 0: no limit
	logger        *slog.Logger
	maxHold       time.Duration // 0: no cap
	observer      reporter      // nil: none
	metadata      string        // "": none (WithMetadata)
	replicas      int           // 0: no WAIT
	ackTimeout    time.Duration // WAIT's timeout when replicas > 0
	retention     time.Duration // fence counters' life after a grant (WithFenceRetention)
	noTracking    bool          // WithLossTracking(false)
	sharded       bool          // every node is a Cluster: publish with SPUBLISH (set by newCore)
	announce      bool          // an election's leader: its release is always published (announced)
	ttlBoxed      any           // ttlMillis of the core's TTL, boxed once (see ttlArg)
}

func defaultConfig() config {
	return config{
		ttl:         10 * time.Second,
		autoRenew:   true,
		driftFactor: 0.01,
		prefix:      "redlock:",
		fencing:     true,
		retention:   scripts.DefaultFenceRetention,
		unanswered:  defaultUnansweredLimit,
		retry:       exponentialRetry(8*time.Millisecond, 512*time.Millisecond),
		logger:      slog.New(slog.DiscardHandler),
	}
}

// defaultUnansweredLimit is WithUnansweredLimit's default.
const defaultUnansweredLimit = 10 * time.Second

// maxMetadata bounds WithMetadata: it travels with every acquisition.
const maxMetadata = 64 << 10

// withOptions returns a copy of c with opts (Options) applied and validated.
func withOptions[O ~func(*config)](c config, opts []O) (config, error) {
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("redlock: nil Option")
		}
		o(&c)
	}
	return c, c.validate()
}

// callOptions is the config of one call: c itself, shared read-only by
// calls without options, or a copy with opts applied.
func callOptions[O ~func(*config)](c *config, opts []O) (*config, error) {
	if len(opts) == 0 {
		return c, nil
	}
	own, err := withOptions(*c, opts)
	if err != nil {
		return nil, err
	}
	return &own, nil
}

// ttlArg is ttlMillis(c.ttl) as a script argument: boxed once for the
// core's TTL, which most acquires send, else boxed per call.
func (c *config) ttlArg() any {
	if v, ok := c.ttlBoxed.(int64); ok && v == ttlMillis(c.ttl) {
		return c.ttlBoxed
	}
	return ttlMillis(c.ttl)
}

// maxTTL bounds every lease: far beyond any real critical section, and far
// below where Until's arithmetic (now + TTL) could overflow.
const maxTTL = 365 * 24 * time.Hour

func (c *config) validate() error {
	switch {
	case math.IsNaN(c.driftFactor) || math.IsInf(c.driftFactor, 0) || math.Signbit(c.driftFactor) || c.driftFactor >= 0.5:
		return fmt.Errorf("redlock: drift factor must be in [0, 0.5), got %v", c.driftFactor)
	case checkTTL(c.ttl, c.driftFactor) != nil:
		return fmt.Errorf("redlock: %w", checkTTL(c.ttl, c.driftFactor))
	case c.renewInterval < 0:
		return fmt.Errorf("redlock: renew interval must be positive, got %v", c.renewInterval)
	case c.renewInterval > 0 && c.renewInterval >= c.ttl-drift(c.ttl, c.driftFactor):
		return fmt.Errorf("redlock: renew interval %v must be shorter than TTL %v minus drift %v", c.renewInterval, c.ttl, drift(c.ttl, c.driftFactor))
	case c.nodeTimeout < 0:
		return fmt.Errorf("redlock: node timeout must be positive, got %v", c.nodeTimeout)
	case c.nodeTimeout > maxTTL:
		return fmt.Errorf("redlock: node timeout must be at most %v, got %v", maxTTL, c.nodeTimeout)
	case c.prefix == "" || strings.ContainsAny(c.prefix, "{}"):
		return fmt.Errorf("redlock: key prefix must be non-empty and free of '{' and '}', got %q", c.prefix)
	case c.retry == nil:
		return fmt.Errorf("redlock: nil RetryFunc")
	case len(c.metadata) > maxMetadata:
		return fmt.Errorf("redlock: metadata of %d bytes, at most %d", len(c.metadata), maxMetadata)
	case c.retention < time.Second:
		return fmt.Errorf("redlock: fence retention must be at least 1s, got %v", c.retention)
	case c.unanswered < 0:
		return fmt.Errorf("redlock: unanswered limit must not be negative, got %v", c.unanswered)
	case c.maxHold < 0:
		return fmt.Errorf("redlock: max hold must not be negative, got %v", c.maxHold)
	case c.replicas < 0 || c.replicas > maxReplicaAcks:
		return fmt.Errorf("redlock: replica acks must be in [0, %d], got %d", maxReplicaAcks, c.replicas)
	case c.ackTimeout < 0 || c.ackTimeout > maxAckTimeout:
		return fmt.Errorf("redlock: replica ack timeout must be in [0, %v], got %v", maxAckTimeout, c.ackTimeout)
	case c.replicas > 0 && c.ackTimeout < time.Millisecond:
		return fmt.Errorf("redlock: replica ack timeout must be at least 1ms with %d replicas, got %v", c.replicas, c.ackTimeout)
	case c.replicas > 0 && c.ackTimeout >= c.ttl:
		return fmt.Errorf("redlock: replica ack timeout %v must be shorter than TTL %v", c.ackTimeout, c.ttl)
	}
	return nil
}

// maxReplicaAcks bounds WithReplicaAcks's replicas: far beyond any real
// deployment, so a larger number is a mistake, not a wish.
const maxReplicaAcks = 1024

// maxAckTimeout bounds WithReplicaAcks's timeout: WAIT is for
// milliseconds, and a lock that waits minutes for a replica is a mistake.
const maxAckTimeout = time.Minute

// waitLateness is how late Redis (7.0) may answer a WAIT past its timeout:
// blocked clients are timed out by the server's cron, which runs every
// 100ms at the default hz.
const waitLateness = 100 * time.Millisecond

// timeout is the per-node call bound for a lease of ttl: the node timeout,
// plus the replica ack timeout and WAIT's lateness when acks are asked for.
func (c *config) timeout(ttl time.Duration) time.Duration {
	if c.replicas > 0 {
		return c.nodeTimeoutFor(ttl) + c.ackTimeout + waitLateness
	}
	return c.nodeTimeoutFor(ttl)
}

// nodeTimeoutFor is the per-node bound of a call without WAIT.
func (c *config) nodeTimeoutFor(ttl time.Duration) time.Duration {
	if c.nodeTimeout > 0 {
		return c.nodeTimeout
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

// exponentialRetry is ExponentialRetry, as the engine's default.
func exponentialRetry(lo, hi time.Duration) func(attempt int) time.Duration {
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
