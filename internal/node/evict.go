package node

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// evictionProbe holds the maxmemory-policy a node's server reported during
// the warm-up, so that the constructor can warn, once per node, that the
// server may evict lock keys.
//
// Lock keys carry an expiry, and a volatile-* policy evicts only keys with
// one (on a server shared with a cache whose keys have none, only lock keys);
// allkeys-* may evict them too. A held lock then vanishes, and its holder
// learns of it only at its next renewal (LossDeleted, or LossTaken). A
// warning is all the library can do about it, and it costs no lock path
// anything: one command per node, once, in the warm-up.
type evictionProbe struct {
	// policy is nil until the server answered. Atomic: a warm-up that
	// outlives the constructor's wait stores it while the constructor reads.
	policy atomic.Pointer[string]
	// minReplicas is the master's min-replicas-to-write, read for a
	// go-redis Sentinel client only; nil when not read.
	minReplicas atomic.Pointer[string]
}

// Probe reads maxmemory-policy through a one-command pipeline (the Client
// interface offers no more than that; see FetchRunID). Any failure leaves
// the policy unknown, and no warning follows: an ACL user without +config,
// a managed Redis that renames or hides CONFIG, a node that does not answer.
// Through a Cluster client CONFIG GET reaches one arbitrary node, and through
// a Ring one shard: the answer stands for the deployment, which is fine for
// a warning, since shards of one deployment are normally configured alike.
//
// For a go-redis Sentinel client the same pipeline reads
// min-replicas-to-write (see WarnSentinel).
func (p *evictionProbe) Probe(ctx context.Context, cl Client) {
	pipe := cl.Pipeline()
	cmd := pipe.ConfigGet(ctx, "maxmemory-policy")
	var minRepl *redis.MapStringStringCmd
	if SentinelDialer(cl) != nil {
		minRepl = pipe.ConfigGet(ctx, "min-replicas-to-write")
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	if v, ok := cmd.Val()["maxmemory-policy"]; ok && cmd.Err() == nil {
		p.policy.Store(&v)
	}
	if minRepl != nil && minRepl.Err() == nil {
		if v, ok := minRepl.Val()["min-replicas-to-write"]; ok {
			p.minReplicas.Store(&v)
		}
	}
}

// WarnSentinel logs one warning per go-redis Sentinel client whose master
// reported min-replicas-to-write 0 during the warm-up. A failover demotes
// a master that may still be up (SENTINEL FAILOVER, a master paused past
// down-after, a partition): it accepts writes until Sentinel reconfigures
// it, some ten seconds later, and a client that has not followed the
// switch yet gets locks there that the new master does not know. With
// min-replicas-to-write 1 (and min-replicas-max-lag) on every server of the
// group, a master whose replicas left it refuses writes; WithReplicaAcks
// makes each grant wait for a replica instead.
func WarnSentinel(nodes []*Node, logger *slog.Logger) {
	for _, n := range nodes {
		if v := n.Evict.minReplicas.Load(); v != nil && *v == "0" {
			logger.Warn("redlock: Sentinel master without min-replicas-to-write: after a failover the demoted master accepts lock writes until Sentinel converts it; set min-replicas-to-write 1 and min-replicas-max-lag on every server of the group, or use WithReplicaAcks",
				"node", n.Idx)
		}
	}
}

// evicting returns the policy the server reported and whether it may evict
// keys with an expiry: every policy but noeviction. A policy not reported
// (yet) is not one.
func (p *evictionProbe) evicting() (policy string, ok bool) {
	v := p.policy.Load()
	if v == nil || *v == "" || *v == "noeviction" {
		return "", false
	}
	return *v, true
}

// WarnEviction logs one warning per node whose server reported an evicting
// maxmemory-policy during the warm-up. A node that had not answered by the
// time the constructor stopped waiting for it is not reported.
func WarnEviction(nodes []*Node, logger *slog.Logger) {
	for _, n := range nodes {
		if policy, ok := n.Evict.evicting(); ok {
			logger.Warn("redlock: maxmemory-policy may evict lock keys: a held lock can vanish before its lease ends, and its holder learns it only at its next renewal; give locks a Redis of their own, or use noeviction",
				"node", n.Idx, "addr", n.Addr, "policy", policy)
		}
	}
}
