package redlock

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The pub/sub transport that wakes waiting Lock calls: one connection per
// node (per channel on a Ring, which shards channels like keys, and on a
// Cluster, where releases use sharded pub/sub: SSUBSCRIBE on the shard that
// owns the channel's slot), and whether release messages can be trusted. It hands what it hears to the
// local queue (queue.go) through the listener interface, and holds no
// pointer back to the core.

// pubsub is a core's pub/sub connections.
type pubsub struct {
	nodes  []*node
	quorum int
	life   *lifecycle
	logger *slog.Logger
	sink   listener
	// sharded: the nodes are Clusters, whose releases publish with SPUBLISH
	// (scripts.go's sharded twins); waiters SSUBSCRIBE, one connection per
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

// listener is what the transport tells the local queue.
type listener interface {
	dispatch(channel, payload string) // a release message arrived
	connDown()                        // a connection went down: messages may be lost
	unsubscribed(channel string)      // a node confirmed UNSUBSCRIBE of channel
	missedAll()                       // the connections are re-homed: messages may have been missed
	moved(channel string)             // channel is subscribed again after its slot moved
}

func newPubsub(nodes []*node, quorum int, life *lifecycle, logger *slog.Logger, sink listener, sharded bool) *pubsub {
	return &pubsub{nodes: nodes, quorum: quorum, life: life, logger: logger, sink: sink, sharded: sharded, heard: make(map[string]int)}
}

// shardSubscriber is what a client needs for sharded pub/sub
// (*redis.ClusterClient has it).
type shardSubscriber interface {
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// stateReloader is a Cluster client's way to learn where slots moved.
type stateReloader interface {
	ReloadState(ctx context.Context)
}

// close ends the connections' goroutines, which close the connections; it
// waits for none of them (Close bounds its wait).
func (ps *pubsub) close() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.closed = true
}

// rehomeGap is the least time between two re-homes of one node's pub/sub.
const rehomeGap = time.Second

// subTimeout bounds one SUBSCRIBE or UNSUBSCRIBE when the client applies
// ctx deadlines (ContextTimeoutEnabled); otherwise the client's own timeouts
// do.
const subTimeout = 5 * time.Second

// nodeSubs is one node's pub/sub connections and the SUBSCRIBE/UNSUBSCRIBE
// calls waiting to be sent on them. A goroutine of its own (run) owns the
// connections and sends the calls, in the order they were asked for: go-redis
// holds the PubSub's mutex while it dials and handshakes, which on an
// unresponsive node lasts the client's read timeout, and neither a Lock call,
// ps.mu, nor Close may wait for that.
type nodeSubs struct {
	ps   *pubsub
	n    *node
	mu   sync.Mutex
	ops  []subOp
	kick chan struct{} // buffered 1: ops were added

	// Owned by run.
	main    *subConn            // all channels, except on a Ring or sharded
	perChan map[string]*subConn // a Ring, or sharded: one connection per channel
	// legacy: sharded, but the server has no SSUBSCRIBE (before 7.0), so
	// the scripts fell back to PUBLISH: SUBSCRIBE.
	legacy   bool
	channels map[string]bool // subscribed now
	rehomed  time.Time
}

// subConn is one pub/sub connection and the goroutine reading it.
type subConn struct {
	ps      *redis.PubSub
	s       *nodeSubs
	channel string        // a per-channel connection's channel, else ""
	sharded bool          // subscribed with SSUBSCRIBE
	stop    chan struct{} // closed when the connection is retired
	up      bool          // owned by the reading goroutine
	// moved: opened anew because the channel's slot moved (opReopen); its
	// first confirmation wakes the channel's waiters (listener.moved).
	moved bool
}

type subOpKind uint8

const (
	opSubscribe subOpKind = iota
	opUnsubscribe
	opRehome
	opReopen // a sharded channel's slot moved, or its shard refused it: subscribe anew where it lives now
)

type subOp struct {
	kind    subOpKind
	channel string
	legacy  bool            // opReopen: the server has no SSUBSCRIBE
	ack     chan<- struct{} // receives once sent (or failed); buffered to the node count
}

func (s *nodeSubs) push(op subOp) {
	s.mu.Lock()
	s.ops = append(s.ops, op)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// subscribed waits until need nodes acknowledged on ack that their
// SUBSCRIBE was sent, timeout passes or ctx ends. A release reaches a quorum
// of nodes, so it is seen once a quorum of them has the subscription.
func subscribed(ctx context.Context, ack <-chan struct{}, need int, timeout time.Duration) {
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

// subscribe asks every node's connection to subscribe channel, and returns
// a channel that receives once per node whose SUBSCRIBE was sent. The local
// queue calls it and unsubscribe under its own mutex, so SUBSCRIBE and
// UNSUBSCRIBE of one channel are queued for each connection in the order
// its queue was created and emptied. It sends nothing itself (see
// nodeSubs).
func (ps *pubsub) subscribe(channel string) <-chan struct{} {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		return nil // waiters give up on their own: Close closed c.life.closing first
	}
	if ps.subs == nil {
		if !ps.life.goCount(len(ps.nodes)) {
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

func (ps *pubsub) unsubscribe(channel string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, s := range ps.subs {
		s.push(subOp{kind: opUnsubscribe, channel: channel})
	}
}

// suspect reports that a release on channel went unheard: every node's
// pub/sub connections are re-homed (rate-limited per node).
func (ps *pubsub) suspect(channel string) {
	ps.sink.missedAll()
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

// run sends one node's queued calls until Close, then closes its
// connections.
func (s *nodeSubs) run() {
	defer s.ps.life.wg.Done()
	defer s.closeAll()
	for {
		select {
		case <-s.ps.life.closing:
			return
		case <-s.kick:
		}
		for {
			s.mu.Lock()
			if len(s.ops) == 0 {
				s.mu.Unlock()
				break
			}
			op := s.ops[0]
			s.ops = s.ops[1:]
			s.mu.Unlock()
			if s.ps.life.isClosing() {
				return
			}
			s.do(op)
			if op.ack != nil {
				op.ack <- struct{}{}
			}
		}
	}
}

// do carries out one call. An error means the connection is down; go-redis
// resubscribes every channel when it reconnects, and waiters have their
// timers meanwhile.
func (s *nodeSubs) do(op subOp) {
	ctx, cancel := context.WithTimeout(context.Background(), subTimeout)
	defer cancel()
	switch op.kind {
	case opSubscribe:
		s.channels[op.channel] = true
		if s.n.ring || s.ps.sharded {
			if s.perChan[op.channel] == nil {
				s.perChan[op.channel] = s.open(ctx, op.channel)
			}
			return
		}
		if s.main == nil {
			s.main = s.open(ctx)
		}
		if s.main != nil {
			_ = s.main.ps.Subscribe(ctx, op.channel)
		}
	case opUnsubscribe:
		delete(s.channels, op.channel)
		if sc := s.perChan[op.channel]; sc != nil {
			delete(s.perChan, op.channel)
			s.retire(sc)
		}
		if s.main != nil {
			_ = s.main.ps.Unsubscribe(ctx, op.channel)
		}
	case opRehome:
		if time.Since(s.rehomed) < rehomeGap {
			return
		}
		s.rehomed = time.Now()
		s.ps.logger.Info("redlock: a release went unheard; re-opening pub/sub", "node", s.n.idx, "channel", op.channel)
		if s.main != nil {
			s.retire(s.main)
			s.main = nil
			if len(s.channels) > 0 {
				s.main = s.open(ctx, slices.Collect(maps.Keys(s.channels))...)
			}
		}
		for ch, sc := range s.perChan {
			s.retire(sc)
			s.perChan[ch] = s.open(ctx, ch)
		}
	case opReopen:
		sc := s.perChan[op.channel]
		if sc == nil || !s.channels[op.channel] {
			return // unsubscribed meanwhile
		}
		if op.legacy && !s.legacy {
			s.legacy = true
			s.ps.logger.Info("redlock: the server has no sharded pub/sub (SSUBSCRIBE); waiters use SUBSCRIBE", "node", s.n.idx)
		}
		s.retire(sc)
		// Retired: Close must not retire it again if it comes during the
		// pause below (closing a closed stop channel panicked).
		delete(s.perChan, op.channel)
		// Not sooner than a refusing shard's pause allows.
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-s.ps.life.closing:
			t.Stop()
			return
		case <-t.C:
		}
		if r, ok := s.n.client.(stateReloader); ok {
			r.ReloadState(ctx)
		}
		s.perChan[op.channel] = s.openMoved(ctx, op.channel)
	}
}

// open opens a pub/sub connection subscribed to channels and starts its
// reader; nil once Close has stopped the core's goroutines.
func (s *nodeSubs) open(ctx context.Context, channels ...string) *subConn {
	return s.opened(ctx, &subConn{s: s, stop: make(chan struct{})}, channels)
}

// openMoved opens channel's connection anew after its slot moved.
func (s *nodeSubs) openMoved(ctx context.Context, channel string) *subConn {
	return s.opened(ctx, &subConn{s: s, stop: make(chan struct{}), moved: true}, []string{channel})
}

func (s *nodeSubs) opened(ctx context.Context, sc *subConn, channels []string) *subConn {
	if !s.ps.life.goCount(1) {
		return nil
	}
	if len(channels) == 1 && (s.n.ring || s.ps.sharded) {
		sc.channel = channels[0]
	}
	if ss, ok := s.n.client.(shardSubscriber); ok && s.ps.sharded && !s.legacy {
		sc.sharded = true
		sc.ps = ss.SSubscribe(ctx, channels...)
	} else {
		sc.ps = s.n.client.Subscribe(ctx, channels...)
	}
	s.ps.down.Add(1) // until its first confirmed read
	go s.ps.receive(sc)
	return sc
}

// retire closes a connection and ends its reader.
func (s *nodeSubs) retire(sc *subConn) {
	if sc == nil {
		return
	}
	close(sc.stop)
	_ = sc.ps.Close()
}

func (s *nodeSubs) closeAll() {
	s.retire(s.main)
	s.main = nil
	for ch, sc := range s.perChan {
		s.retire(sc)
		delete(s.perChan, ch)
	}
}

// receive reads one pub/sub connection until it is retired or Close.
func (ps *pubsub) receive(sc *subConn) {
	defer ps.life.wg.Done()
	setUp := func(v bool) {
		if v != sc.up {
			sc.up = v
			if v {
				ps.down.Add(-1)
			} else {
				ps.down.Add(1)
				// Heads sleeping until a lease ends, trusting messages that
				// may now be lost, go back to polling.
				ps.sink.connDown()
			}
		}
	}
	defer func() {
		if sc.up {
			setUp(false)
		}
		ps.down.Add(-1) // this connection no longer counts at all
	}()
	for {
		msg, err := sc.ps.Receive(context.Background())
		if err != nil {
			setUp(false)
			var rerr redis.Error
			if sc.sharded && sc.channel != "" && errors.As(err, &rerr) {
				// The shard refused SSUBSCRIBE: the slot moved (MOVED), or the
				// server has no sharded pub/sub. Subscribe anew, after the
				// pause below.
				defer sc.s.push(subOp{kind: opReopen, channel: sc.channel, legacy: isUnknownCommand(err)})
				return
			}
			// go-redis reconnects (and resubscribes) on the next call. Pause
			// briefly so a node that refuses connections is not dialled in a
			// tight loop.
			t := time.NewTimer(50 * time.Millisecond)
			select {
			case <-sc.stop:
				t.Stop()
				return
			case <-ps.life.closing:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "sunsubscribe" && sc.channel != "" {
				// Not ours (a per-channel connection is closed, never
				// unsubscribed): the channel's slot moved to another shard,
				// which the server says this way. Releases meanwhile may be
				// missed: heads poll until the channel is subscribed where
				// it lives now.
				setUp(false)
				ps.mu.Lock()
				ps.heard[m.Channel] = max(ps.heard[m.Channel]-1, 0)
				ps.mu.Unlock()
				sc.s.push(subOp{kind: opReopen, channel: m.Channel})
				continue
			}
			setUp(true)
			on := m.Kind == "subscribe" || m.Kind == "ssubscribe"
			ps.confirmed(m.Channel, on)
			if on && sc.moved {
				// A release published while the slot moved (after the old
				// shard said sunsubscribe, before this subscription) was
				// heard by nobody: the waiters look now rather than at
				// their next poll.
				sc.moved = false
				ps.sink.moved(m.Channel)
			}
		case *redis.Message:
			setUp(true)
			ps.sink.dispatch(m.Channel, m.Payload)
		}
	}
}

// confirmed records a node's confirmation of a SUBSCRIBE (on) or an
// UNSUBSCRIBE of channel.
func (ps *pubsub) confirmed(channel string, on bool) {
	if !on {
		ps.sink.unsubscribed(channel) // outside ps.mu: the queue calls in under its own
		ps.mu.Lock()
		delete(ps.heard, channel)
		ps.mu.Unlock()
		return
	}
	ps.mu.Lock()
	ps.heard[channel]++
	ps.mu.Unlock()
}

// listening reports whether a quorum of nodes confirmed that channel is
// subscribed and every connection is up, so that a release published from
// now on is heard.
func (ps *pubsub) listening(channel string) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.subs == nil {
		return false // no pub/sub yet: every uncontended Lock asks
	}
	return ps.heard[channel] >= ps.quorum && ps.down.Load() == 0
}

// trusted reports whether release messages can be relied on: every pub/sub
// connection is up.
func (ps *pubsub) trusted() bool {
	ps.mu.Lock()
	opened := ps.subs != nil
	ps.mu.Unlock()
	return opened && ps.down.Load() == 0
}

// isUnknownCommand reports the server's answer to a command it does not
// have ("ERR unknown command 'ssubscribe'..." before Redis 7.0).
func isUnknownCommand(err error) bool { return redis.HasErrorPrefix(err, "unknown command") }
