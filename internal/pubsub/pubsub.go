// Package pubsub is the pub/sub transport that wakes waiting Lock calls:
// one connection per node (per channel on a Ring, which shards channels
// like keys, and on a Cluster, where releases use sharded pub/sub:
// SSUBSCRIBE on the shard that owns the channel's slot), and whether
// release messages can be trusted. It hands what it hears to the local
// queue (internal/engine's queue*.go) through the Listener interface, and
// holds no pointer back to it. Each node's connections and the calls sent
// on them are in pubsub_node.go, the reading of one connection in
// pubsub_conn.go.
package pubsub

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlockgo/redlock/internal/lifecycle"
	"github.com/redlockgo/redlock/internal/node"
)

// Conns are a core's pub/sub connections.
type Conns struct {
	nodes  []*node.Node
	quorum int
	life   *lifecycle.Life
	logger *slog.Logger
	sink   Listener
	// sharded: the nodes are Clusters, whose releases publish with SPUBLISH
	// (the sharded twins of internal/scripts); waiters SSUBSCRIBE, one connection per
	// channel, and follow the channel's slot when it moves.
	sharded bool

	mu     sync.Mutex
	subs   []*nodeSubs // one per node, nil until the first waiter
	closed bool        // set by close: no connection may open after it
	// down counts pub/sub connections whose last read failed or that are
	// not confirmed yet; while it is 0, a head waiter trusts release
	// messages and sleeps until the holder's lease ends (capped) instead of
	// polling.
	down atomic.Int32
	// heard counts, per channel, the nodes that confirmed its SUBSCRIBE
	// (reset when the channel is unsubscribed or the connections re-homed):
	// a Lock call that sees a quorum of them before its first attempt
	// cannot miss a release after that attempt, so its first wait trusts
	// messages instead of polling.
	heard map[string]int
}

// Listener is what the transport tells the local queue.
type Listener interface {
	Dispatch(channel, payload string) // a release message arrived
	ConnDown()                        // a connection went down: messages may be lost
	Unsubscribed(channel string)      // a node confirmed UNSUBSCRIBE of channel
	MissedAll()                       // the connections are re-homed: messages may have been missed
	Moved(channel string)             // channel is subscribed again after its slot moved
}

func New(nodes []*node.Node, quorum int, life *lifecycle.Life, logger *slog.Logger, sink Listener, sharded bool) *Conns {
	return &Conns{nodes: nodes, quorum: quorum, life: life, logger: logger, sink: sink, sharded: sharded, heard: make(map[string]int)}
}

// Close makes later subscriptions and re-homings no-ops. The connections'
// goroutines end on their own when Close closes the lifecycle's closing,
// which it does first, and close their connections; nothing here waits for
// them (Close bounds its wait).
func (ps *Conns) Close() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.closed = true
}

// Subscribed waits until need nodes acknowledged on ack that their
// SUBSCRIBE was sent, timeout passes or ctx ends. A release reaches a quorum
// of nodes, so it is seen once a quorum of them has the subscription.
func Subscribed(ctx context.Context, ack <-chan struct{}, need int, timeout time.Duration) {
	if ack == nil {
		return
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for range need {
		select {
		case <-ack:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// Subscribe asks every node's connection to subscribe channel, and returns
// a channel that receives once per node whose SUBSCRIBE was sent. The local
// queue calls it and unsubscribe under its own mutex, so SUBSCRIBE and
// UNSUBSCRIBE of one channel are queued for each connection in the order
// its queue was created and emptied. It sends nothing itself (see
// nodeSubs).
func (ps *Conns) Subscribe(channel string) <-chan struct{} {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		return nil // waiters give up on their own: Close closed c.life.closing first
	}
	if ps.subs == nil {
		if !ps.life.GoCount(len(ps.nodes)) {
			return nil
		}
		ps.subs = make([]*nodeSubs, len(ps.nodes))
		for i, n := range ps.nodes {
			s := &nodeSubs{ps: ps, n: n, kick: make(chan struct{}, 1), perChan: map[string]*subConn{}, channels: map[string]bool{}}
			ps.subs[i] = s
			go s.run()
		}
	}
	ack := make(chan struct{}, len(ps.subs))
	for _, s := range ps.subs {
		s.push(subOp{kind: opSubscribe, channel: channel, ack: ack})
	}
	return ack
}

func (ps *Conns) Unsubscribe(channel string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, s := range ps.subs {
		s.push(subOp{kind: opUnsubscribe, channel: channel})
	}
}

// Suspect reports that a release on channel went unheard: every node's
// pub/sub connections are re-homed (rate-limited per node).
func (ps *Conns) Suspect(channel string) {
	ps.sink.MissedAll()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		return
	}
	clear(ps.heard) // re-confirmed by the new connections
	for _, s := range ps.subs {
		s.push(subOp{kind: opRehome, channel: channel})
	}
}

// confirmed records a node's confirmation of a SUBSCRIBE (on) or an
// UNSUBSCRIBE of channel.
func (ps *Conns) confirmed(channel string, on bool) {
	if !on {
		ps.sink.Unsubscribed(channel) // outside ps.mu: the queue calls in under its own
		ps.mu.Lock()
		delete(ps.heard, channel)
		ps.mu.Unlock()
		return
	}
	ps.mu.Lock()
	ps.heard[channel]++
	ps.mu.Unlock()
}

// Listening reports whether a quorum of nodes confirmed that channel is
// subscribed and every connection is up, so that a release published from
// now on is heard.
func (ps *Conns) Listening(channel string) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.subs == nil {
		return false // no pub/sub yet: every uncontended Lock asks
	}
	return ps.heard[channel] >= ps.quorum && ps.down.Load() == 0
}

// Trusted reports whether release messages can be relied on: every pub/sub
// connection is up.
func (ps *Conns) Trusted() bool {
	ps.mu.Lock()
	opened := ps.subs != nil
	ps.mu.Unlock()
	return opened && ps.down.Load() == 0
}
