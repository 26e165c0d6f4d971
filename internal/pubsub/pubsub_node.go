package pubsub

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/node"
)

// shardSubscriber is what a client needs for sharded pub/sub
// (*redis.ClusterClient has it).
type shardSubscriber interface {
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// stateReloader is a Cluster client's way to learn where slots moved.
type stateReloader interface {
	ReloadState(ctx context.Context)
}

// rehomeGap is the least time between two re-homes of one node's pub/sub.
const rehomeGap = time.Second

// SubTimeout bounds one SUBSCRIBE or UNSUBSCRIBE when the client applies
// ctx deadlines (ContextTimeoutEnabled); otherwise the client's own timeouts
// do.
const SubTimeout = 5 * time.Second

// nodeSubs is one node's pub/sub connections and the SUBSCRIBE/UNSUBSCRIBE
// calls waiting to be sent on them. A goroutine of its own (run) owns the
// connections and sends the calls, in the order they were asked for: go-redis
// holds the PubSub's mutex while it dials and handshakes, which on an
// unresponsive node lasts the client's read timeout, and neither a Lock call,
// ps.mu, nor Close may wait for that.
type nodeSubs struct {
	ps   *Conns
	n    *node.Node
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

// run sends one node's queued calls until Close, then closes its
// connections.
func (s *nodeSubs) run() {
	defer s.ps.life.WG.Done()
	defer s.closeAll()
	for {
		select {
		case <-s.ps.life.Closing:
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
			if s.ps.life.IsClosing() {
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
	ctx, cancel := context.WithTimeout(context.Background(), SubTimeout)
	defer cancel()
	switch op.kind {
	case opSubscribe:
		s.subscribe(ctx, op.channel)
	case opUnsubscribe:
		s.unsubscribe(ctx, op.channel)
	case opRehome:
		s.rehome(ctx, op.channel)
	case opReopen:
		s.reopen(ctx, op.channel, op.legacy)
	}
}

// subscribe subscribes channel: on a connection of its own on a Ring or
// sharded, else on the node's one connection, opened with the first.
func (s *nodeSubs) subscribe(ctx context.Context, channel string) {
	s.channels[channel] = true
	if s.n.Ring || s.ps.sharded {
		if s.perChan[channel] == nil {
			s.perChan[channel] = s.open(ctx, channel)
		}
		return
	}
	if s.main == nil {
		s.main = s.open(ctx)
	}
	if s.main != nil {
		_ = s.main.ps.Subscribe(ctx, channel)
	}
}

// unsubscribe closes channel's own connection, or unsubscribes it on the
// node's one connection. A closed connection confirms nothing, so its
// closing counts as the confirmation: the channel is no longer heard, and
// the waiters forget it, as after an UNSUBSCRIBE.
func (s *nodeSubs) unsubscribe(ctx context.Context, channel string) {
	delete(s.channels, channel)
	if sc := s.perChan[channel]; sc != nil {
		delete(s.perChan, channel)
		s.retire(sc)
		s.ps.confirmed(channel, false)
	}
	if s.main != nil {
		_ = s.main.ps.Unsubscribe(ctx, channel)
	}
}

// rehome closes the node's connections and opens new ones subscribed to the
// same channels, at most once per rehomeGap; channel is the one whose
// release went unheard, for the log.
func (s *nodeSubs) rehome(ctx context.Context, channel string) {
	if time.Since(s.rehomed) < rehomeGap {
		return
	}
	s.rehomed = time.Now()
	s.ps.logger.Info("redlock: a release went unheard; re-opening pub/sub", "node", s.n.Idx, "channel", channel)
	// Down from the old connections' retirement until their successors are
	// open (each counts itself then, until its first confirmation): a waiter
	// that looked in between trusted messages nobody was subscribed to hear.
	s.ps.down.Add(1)
	defer s.ps.down.Add(-1)
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
}

// reopen opens channel's connection anew where its slot lives now, after
// its shard said the slot moved or refused SSUBSCRIBE (legacy: the server
// has no SSUBSCRIBE at all).
func (s *nodeSubs) reopen(ctx context.Context, channel string, legacy bool) {
	sc := s.perChan[channel]
	if sc == nil || !s.channels[channel] {
		return // unsubscribed meanwhile
	}
	if legacy && !s.legacy {
		s.legacy = true
		s.ps.logger.Info("redlock: the server has no sharded pub/sub (SSUBSCRIBE); waiters use SUBSCRIBE", "node", s.n.Idx)
	}
	// Down through the pause below until the new connection is open, as in
	// rehome.
	s.ps.down.Add(1)
	defer s.ps.down.Add(-1)
	s.retire(sc)
	// Retired: Close must not retire it again if it comes during the
	// pause below (closing a closed stop channel panicked).
	delete(s.perChan, channel)
	// Not sooner than a refusing shard's pause allows.
	t := time.NewTimer(50 * time.Millisecond)
	select {
	case <-s.ps.life.Closing:
		t.Stop()
		return
	case <-t.C:
	}
	if r, ok := s.n.Client.(stateReloader); ok {
		r.ReloadState(ctx)
	}
	s.perChan[channel] = s.openMoved(ctx, channel)
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
	if !s.ps.life.GoCount(1) {
		return nil
	}
	if len(channels) == 1 && (s.n.Ring || s.ps.sharded) {
		sc.channel = channels[0]
	}
	// Down until its first confirmed read, from before the dial that
	// (S)SUBSCRIBE makes: no waiter trusts a connection still dialling.
	s.ps.down.Add(1)
	if ss, ok := s.n.Client.(shardSubscriber); ok && s.ps.sharded && !s.legacy {
		sc.sharded = true
		sc.ps = ss.SSubscribe(ctx, channels...)
	} else {
		sc.ps = s.n.Client.Subscribe(ctx, channels...)
	}
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
