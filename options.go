package redlock

import (
	"log/slog"
	"time"

	"github.com/redlockgo/redlock/internal/engine"
)

// Option configures a Locker or Redlock. Given to the constructor it sets the
// default for every call; given to Lock, TryLock or Do it overrides that
// default for the one call.
type Option func(*config)

// config holds every tunable (internal/engine's Config; its DefaultConfig is
// the one place defaults live).
type config = engine.Config

// WithTTL sets the lease length of a lock on the server. Default 10s; at
// least 1ms plus the drift allowance, at most one year; sent in whole
// milliseconds (validity is computed from the truncated value). With
// auto-renew on, a crashed holder's lock is free again at most one TTL after
// its last renewal; with it off, the lock is held for exactly one TTL unless
// extended.
func WithTTL(d time.Duration) Option { return func(c *config) { c.TTL = d } }

// WithAutoRenew turns the watchdog on or off. Default true: a held lock is
// renewed every renew interval (TTL/3 unless [WithRenewInterval] says
// otherwise) until it is unlocked or lost.
func WithAutoRenew(on bool) Option { return func(c *config) { c.AutoRenew = on } }

// WithRenewInterval sets how often the watchdog renews a held lock. Default
// TTL/3. It must be shorter than the TTL minus the clock drift allowance.
// Whatever it says, a renewal comes no later than halfway through the
// current lease's validity (after an Extend to a shorter TTL too), so that a
// retry still fits before Until.
func WithRenewInterval(d time.Duration) Option { return func(c *config) { c.RenewInterval = d } }

// WithNodeTimeout bounds every call to one Redis node (acquire, extend,
// release), enforced by the library whatever the client's own timeouts.
// Default TTL/10, kept between 100ms and 1s; an acquisition or Extend
// also stops waiting when the lease's validity runs out. A Redlock
// treats a node that has not answered by then as failed for that call, but
// settles every call as soon as a quorum has answered, so a hung minority
// costs nothing; the bound matters when no quorum has answered yet. It also
// bounds how long Close waits. Keep it above go-redis's own retry span
// (MaxRetries with backoff) so that a server's refusal (READONLY, LOADING),
// which go-redis retries, reaches the caller instead of a timeout.
func WithNodeTimeout(d time.Duration) Option { return func(c *config) { c.NodeTimeout = d } }

// WithDriftFactor sets the share of the TTL subtracted from a lock's validity
// for clock drift between processes; 2ms for Redis's expiry precision are
// always subtracted on top. Default 0.01. It must be a finite number in
// [0, 0.5) (negative zero, NaN and infinities are refused).
func WithDriftFactor(f float64) Option { return func(c *config) { c.DriftFactor = f } }

// WithKeyPrefix sets the prefix of the keys the library writes. Default
// "redlock:". A lock named n lives at "{<prefix>n}", its fencing counter at
// "{<prefix>n}:fence" (for the retention of [WithFenceRetention] after the
// last grant), and after each release, for at most one TTL (what was left
// of the lease), a marker of the released owner at "{<prefix>n}:released";
// releases are published on "{<prefix>n}:rel". The prefix must be non-empty
// and contain no '{' or '}', so the hash tag of both keys is never empty and
// they share one Cluster slot.
func WithKeyPrefix(p string) Option { return func(c *config) { c.Prefix = p } }

// WithFencing turns fencing tokens on or off. Default true: every acquisition
// mints a token and keeps it in a per-name counter key for the retention of
// [WithFenceRetention]. With fencing off no counter is written and
// [Lock.Token] is 0.
func WithFencing(on bool) Option { return func(c *config) { c.Fencing = on } }

// WithFenceRetention sets how long a name's fencing counter outlives the
// name's last grant. Default 24h; at least 1s. Every other key of a name
// lives no longer than a lease (or 5s for a waiting writer's entry), so a
// name left alone leaves nothing on the server after the retention: a
// service that locks one name per entity does not keep one key per entity
// forever. A lock held longer than that keeps its counter as long as its
// lease, and a grant never shortens a counter's remaining life.
//
// Tokens still increase across an expired counter. A token is the larger
// of the counter plus one and the acquiring client's clock in microseconds
// (for a hand-off to a waiter of the same Locker, the clock of the client
// whose Unlock hands it). An expired counter reads as none, so the next
// token is that clock alone. The
// counter expires only once its server's clock has run the retention d past
// the counter's last write, so the next token is larger than every earlier
// one as long as the clock that floors it is less than d behind the clock
// reading that floored the last token (plus one microsecond per grant
// since): as long as no client's clock is d or more behind another's, less
// any jump forward of the server's clock (which expires the counter
// early). The 24h default is far beyond the steps NTP
// makes (ntpd by default refuses to correct an offset above 1000s) and any
// sane skew between clients, and keeps the counters of names no longer used
// to one day's worth.
// [Locker.Inspect] reports Token 0 for a name whose counter expired.
//
// The retention applies to the counters a call's grant writes, a hand-off
// to a waiter of the same Locker included (the waiter's). A counter raised
// to a token minted elsewhere (a Redlock's write-back to the masters
// behind, a [Locker.LockAll] on a Cluster or Ring client evening its
// names' counters) keeps at least the default (and is never shortened).
func WithFenceRetention(d time.Duration) Option { return func(c *config) { c.Retention = d } }

// WithRetry sets the policy of a waiting Lock: how long it waits between
// attempts on a contended lock and, with [LimitRetry], [MaxRetries] or
// [NoRetry], after how many attempts it gives up. A policy given here bounds
// every wait: a release message may wake the waiter earlier, never later,
// and no wait lasts past the moment the holder's lease would expire.
//
// Without WithRetry, Lock uses ExponentialRetry(8ms, 512ms) and never gives
// up before ctx ends (or [WithUnansweredLimit] runs out), but while its
// release messages can be trusted (pub/sub confirmed on a quorum of nodes)
// it sleeps until the holder's lease would end, at most 1s, instead of
// polling: a release wakes it at once.
func WithRetry(f RetryFunc) Option { return func(c *config) { c.Retry, c.RetrySet = f, true } }

// WithUnansweredLimit bounds how long a waiting Lock (and Do, RLock,
// Semaphore.Acquire, LockAll) keeps trying while no quorum of nodes answers
// at all: connections refused, calls timing out, a server loading its data or
// a failover client's master in the middle of a failover. Once the attempts
// of one call have gone unanswered for d in a row (counted from the start of
// the first; the last attempt comes at d), it gives up, even under a ctx
// without deadline, with an error matching [ErrNotObtained] and
// [ErrUnreachable] that names the last cause. To name it, it first asks each
// node that only timed out once more, for up to 2s (a refused dial hides
// behind a timeout), so the call returns about d plus one attempt plus that
// after it began; a ctx that ends meanwhile ends it then, and the error also
// matches the ctx's. Every such attempt is logged at WARN through
// [WithLogger]'s logger, at most once per 5s per call. Contention never
// counts: a node that answers "held by another owner" has answered. Errors
// that no retry can fix (a reply that is not Redis's protocol, a wrong
// password, a missing permission, READONLY from a client that cannot follow a
// failover, out of memory) end the wait at the first attempt whatever d says.
//
// Default 10s: several node timeouts. 0 turns the limit off: Lock then
// waits until ctx ends. Negative values are refused.
func WithUnansweredLimit(d time.Duration) Option { return func(c *config) { c.Unanswered = d } }

// WithMaxHold caps how long a lock is held: d after it was acquired, the
// watchdog stops renewing it, the lock is reported lost ([Lock.Done]
// closes, [Lock.Err] matches [ErrLost] and [LossMaxHold], a Do function's
// context is cancelled with that cause) and its key is released, so a stuck
// holder cannot keep a name forever. The loss comes at d, or at Until if
// that is earlier (a failed renewal). Default 0: no cap. Negative values are
// refused.
func WithMaxHold(d time.Duration) Option { return func(c *config) { c.MaxHold = d } }

// WithMetadata attaches s to the locks taken with this option, stored on
// the server next to the lock for as long as the lock is held (renewals and
// Extend keep it), and readable by [Locker.Inspect], [Redlock.Inspect] and
// the redlock command's status: who holds a name ("host-a pid 4711, nightly
// report"), not only a random owner value. [Lock.Metadata] returns it. A
// new holder without metadata shows none: the stored value names its owner,
// and a stale one is never reported. At most 64 KiB. Exclusive locks only:
// read holds, permits and LockAll locks ignore it.
func WithMetadata(s string) Option { return func(c *config) { c.Metadata = s } }

// WithReplicaAcks makes every write that takes or keeps a lock wait for
// replicas replicas of the node to acknowledge it, for at most timeout: the
// acquire script, each watchdog renewal and [Lock.Extend] are followed by
// WAIT replicas timeout on the same connection that ran the script (WAIT
// counts the acknowledgements of its own connection's writes, so a WAIT on
// another connection would answer at once, whatever replication is doing).
// An acquisition with fewer acknowledgements than asked is released and
// fails with an error matching [ErrNotObtained] and [*ReplicaAcksError]
// (saying how many replicas acknowledged); a renewal or Extend with too few
// is a failed attempt, retried until Until, after which the lock is lost.
// Default replicas 0: no WAIT is sent and nothing else changes.
//
// The per-node time bound ([WithNodeTimeout]) of these calls grows by
// timeout plus 100ms, because Redis answers a timed-out WAIT up to about
// 100ms late. timeout is sent in whole milliseconds, must be at least 1ms
// (WAIT 0 would block forever) and shorter than the TTL, and must stay
// below the client's ReadTimeout, or the client gives up on the reply
// first. A watchdog renewing several locks together on one node sends one
// WAIT for the largest replicas and timeout among them. Replica acks need a
// client that talks to one master per key: a *redis.Client (Sentinel
// failover clients included), a *redis.ClusterClient or a *redis.Ring,
// whose WAIT goes to the connection of the key's own shard.
//
// It narrows the window in which a failover loses a lock, it does not
// close it: WAIT is not consensus. Sentinel or Cluster may still promote a
// replica that did not acknowledge (when another one did), a replica that
// acknowledged may lose the write in its own restart, and a renewal
// acknowledged by no replica still extended the key on the master. Use
// fencing tokens ([Fence], [RedisFence]) for what must not happen twice.
// Negative replicas, more than 1024, a timeout below 1ms with replicas > 0,
// a negative timeout or one above a minute are refused.
func WithReplicaAcks(replicas int, timeout time.Duration) Option {
	return func(c *config) { c.Replicas, c.AckTimeout = replicas, timeout }
}

// WithLogger sets where the library logs: renewal failures and lost locks,
// release messages the server refused to publish, pub/sub trouble of
// waiters, and an evicting maxmemory-policy found at construction.
// Default: nowhere.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		c.Logger = l
	}
}

// WithLossTracking turns off (false) or on the tracking connections that
// let a Locker or Redlock hear at once that a held lock's key was changed
// by someone else (deleted, overwritten, flushed, evicted): two connections
// per node, open while a lock has been held for 50 ms or more (and 2 s
// after), on which the server pushes the names of changed keys that the
// Locker holds (CLIENT TRACKING in default mode, NOLOOP); while they are
// open, renewals run on one of them (through the client's hooks all the
// same).
// Default on, for a *redis.Client (standalone or Sentinel) on a server that
// allows CLIENT TRACKING; a Cluster or Ring client, or a server that refuses
// it, finds such a loss at the next renewal. Without it, loss is found by
// renewals only. Given per call it has no effect: the connections are the
// constructor's. See "Hearing a loss" in SAFETY.md.
func WithLossTracking(on bool) Option { return func(c *config) { c.NoTracking = !on } }

// announced makes a lock's release publish whether or not anyone waits:
// an election's observers hear a resignation that no candidate waits for
// (Election.Campaign).
func announced() Option { return func(c *config) { c.Announce = true } }
