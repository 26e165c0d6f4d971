package redlock

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Waiting for a contended lock.
//
// Every release publishes the released owner on "<lock key>:rel" from inside
// the release script. A core keeps ONE pub/sub connection per node, opened
// with the first waiter and kept until Close, and subscribes a name's channel
// while at least one goroutine waits for that name (and, once contended,
// while this core holds it, and for idleGrace after). A Lock that gets the
// lock at its first attempt never touches pub/sub. Waiters of one core
// queue per name in arrival order; a release message wakes only the head of
// the queue, so a hand-off costs one acquire per process, not one per waiting
// goroutine. A Redlock receives one copy per master; copies with an owner
// already seen are dropped.
//
// Fairness (FIFO within a core): a Lock call does not try at once while the
// name is held by this core or other goroutines already wait for it; it joins
// the tail. So a goroutine that unlocks and locks again goes behind those
// already waiting. Across processes there is no order: whoever's acquire
// reaches Redis first after a release wins.
//
// Messages can be lost (the connection drops, a holder crashes without
// releasing, a lock is lost rather than released). So the head waiter also
// wakes on a timer: the retry policy's delay, capped at the moment the
// holder's lease runs out (the PTTL its last attempt saw). While the pub/sub
// connection is down, that timer is all there is.
type waiters struct {
	c      *core
	mu     sync.Mutex
	queues map[string]*waitQueue // by channel
	subs   []*nodeSubs           // one per node, nil until the first waiter
	closed bool                  // set by close: no connection may open after it
	sweep  *time.Timer           // unsubscribes idle channels; nil when none are idle
	// up counts connections whose last read succeeded; while every node's
	// is up, a head waiter trusts release messages and sleeps until the
	// holder's lease ends instead of polling.
	up atomic.Int32
}

// nodeSubs is one node's pub/sub connection and the SUBSCRIBE/UNSUBSCRIBE
// calls waiting to be sent on it. A goroutine of its own sends them, in the
// order they were asked for: go-redis holds the PubSub's mutex while it dials
// and handshakes, which on an unresponsive node lasts the client's read
// timeout, and neither a Lock call nor ws.mu may wait for that.
type nodeSubs struct {
	ps   *redis.PubSub
	mu   sync.Mutex
	ops  []subOp
	kick chan struct{} // buffered 1: ops were added
}

type subOp struct {
	channel string
	on      bool
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

type waitQueue struct {
	list      []*waiter
	idleSince time.Time // zero while waited on or held; else when that stopped
	lastOwner string    // the release last dispatched; N copies from a Redlock wake once
}

type waiter struct {
	wake chan struct{} // buffered 1: a release arrived while this waiter was head
}

const channelSuffix = ":rel"

func releaseChannel(lockKey string) string { return lockKey + channelSuffix }

// join queues a waiter for channel at the tail, subscribing the channel on
// every node if it is the first. It returns a channel that receives once per
// node whose SUBSCRIBE was sent (nil when nothing was sent): the caller waits
// for a quorum of them, bounded by the node timeout and its ctx, before its
// next attempt, so that a release right after that attempt is not missed,
// and a hung node delays nothing.
func (ws *waiters) join(channel string) (*waiter, <-chan struct{}) {
	w := &waiter{wake: make(chan struct{}, 1)}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.queues[channel]
	var sent <-chan struct{}
	if q == nil {
		q = &waitQueue{}
		ws.queues[channel] = q
		sent = ws.subscribe(channel)
	}
	q.idleSince = time.Time{}
	q.list = append(q.list, w)
	return w, sent
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

// leave removes w. A waiter that leaves without the lock (ctx ended) hands a
// wake-up it had not used yet to the new head; one that got the lock drops
// it: that release came before its own acquisition.
func (ws *waiters) leave(channel string, w *waiter, acquired bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.queues[channel]
	if q == nil {
		return
	}
	for i, x := range q.list {
		if x == w {
			q.list = append(q.list[:i], q.list[i+1:]...)
			break
		}
	}
	if len(q.list) == 0 {
		ws.dropIfIdle(channel, q)
		return
	}
	select {
	case <-w.wake:
		if !acquired {
			notify(q.list[0])
		}
	default:
	}
}

// idle is called when this core stops holding the lock of channel.
func (ws *waiters) idle(channel string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if q := ws.queues[channel]; q != nil && len(q.list) == 0 {
		ws.dropIfIdle(channel, q)
	}
}

// idleGrace is how long a channel stays subscribed after nobody of this core
// waits for or holds its name. A process that takes the same lock again soon
// (a worker loop) would otherwise pay an UNSUBSCRIBE and a SUBSCRIBE per
// critical section.
const idleGrace = 2 * time.Second

// dropIfIdle marks a channel nobody waits on as idle, unless this core holds
// the name (a goroutine of ours is likely to want it next); the sweep
// unsubscribes it once idle for idleGrace. Called under ws.mu (lock order:
// ws.mu, then c.mu).
func (ws *waiters) dropIfIdle(channel string, q *waitQueue) {
	if ws.c.holds(strings.TrimSuffix(channel, channelSuffix)) {
		return
	}
	q.idleSince = time.Now()
	if ws.sweep == nil && !ws.closed {
		ws.sweep = time.AfterFunc(idleGrace, ws.sweepIdle)
	}
}

// sweepIdle unsubscribes the channels idle for idleGrace, and re-arms itself
// for the next one.
func (ws *waiters) sweepIdle() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.sweep = nil
	if ws.closed {
		return
	}
	now := time.Now()
	var next time.Duration
	for channel, q := range ws.queues {
		if len(q.list) > 0 || q.idleSince.IsZero() {
			continue
		}
		if left := idleGrace - now.Sub(q.idleSince); left > 0 {
			if next == 0 || left < next {
				next = left
			}
			continue
		}
		if ws.c.holds(strings.TrimSuffix(channel, channelSuffix)) {
			q.idleSince = time.Time{}
			continue
		}
		delete(ws.queues, channel)
		ws.unsubscribe(channel)
	}
	if next > 0 {
		ws.sweep = time.AfterFunc(next, ws.sweepIdle)
	}
}

// busy reports whether a new Lock call for channel should queue without
// trying: others wait already, or this core holds the name.
func (ws *waiters) busy(channel string) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.queues[channel]
	return q != nil && len(q.list) > 0
}

func (ws *waiters) isHead(channel string, w *waiter) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.queues[channel]
	return q != nil && len(q.list) > 0 && q.list[0] == w
}

// dispatch wakes the head waiter of channel for a release of owner.
func (ws *waiters) dispatch(channel, owner string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.queues[channel]
	if q == nil || len(q.list) == 0 || owner == q.lastOwner {
		return
	}
	q.lastOwner = owner
	notify(q.list[0])
}

func (ws *waiters) wakeHeads() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, q := range ws.queues {
		if len(q.list) > 0 {
			notify(q.list[0])
		}
	}
}

func notify(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// subscribe runs under ws.mu, so SUBSCRIBE and UNSUBSCRIBE of one channel
// are queued for each connection in the order the queue was created and
// emptied. It sends nothing itself (see nodeSubs).
func (ws *waiters) subscribe(channel string) <-chan struct{} {
	if ws.closed {
		return nil // waiters give up on their own: Close closed c.closing first
	}
	if ws.subs == nil {
		if !ws.c.goCount(2 * len(ws.c.nodes)) {
			return nil
		}
		ws.subs = make([]*nodeSubs, len(ws.c.nodes))
		for i, n := range ws.c.nodes {
			s := &nodeSubs{ps: n.client.Subscribe(context.Background()), kick: make(chan struct{}, 1)}
			ws.subs[i] = s
			go ws.receive(s.ps)
			go ws.send(s)
		}
	}
	ack := make(chan struct{}, len(ws.subs))
	for _, s := range ws.subs {
		s.push(subOp{channel: channel, on: true, ack: ack})
	}
	return ack
}

func (ws *waiters) unsubscribe(channel string) {
	for _, s := range ws.subs {
		s.push(subOp{channel: channel})
	}
}

// send sends one node's queued SUBSCRIBE and UNSUBSCRIBE calls until Close.
func (ws *waiters) send(s *nodeSubs) {
	defer ws.c.wg.Done()
	for {
		select {
		case <-ws.c.closing:
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
			// An error means the connection is down; go-redis resubscribes
			// every channel when it reconnects, and waiters have their
			// timers meanwhile.
			if op.on {
				_ = s.ps.Subscribe(context.Background(), op.channel)
			} else {
				_ = s.ps.Unsubscribe(context.Background(), op.channel)
			}
			if op.ack != nil {
				op.ack <- struct{}{}
			}
		}
	}
}

// receive reads one node's pub/sub connection until Close.
func (ws *waiters) receive(ps *redis.PubSub) {
	defer ws.c.wg.Done()
	up := false
	setUp := func(v bool) {
		if v != up {
			up = v
			if v {
				ws.up.Add(1)
			} else {
				ws.up.Add(-1)
				// Heads sleeping until a lease ends, trusting messages that
				// may now be lost, go back to polling.
				ws.wakeHeads()
			}
		}
	}
	defer setUp(false)
	for {
		msg, err := ps.Receive(context.Background())
		if err != nil {
			setUp(false)
			// go-redis reconnects (and resubscribes) on the next call. Pause
			// briefly so a node that refuses connections is not dialled in a
			// tight loop.
			t := time.NewTimer(50 * time.Millisecond)
			select {
			case <-ws.c.closing:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			setUp(true)
		case *redis.Message:
			setUp(true)
			ws.dispatch(m.Channel, m.Payload)
		}
	}
}

// trusted reports whether release messages can be relied on: every node's
// pub/sub connection is up.
func (ws *waiters) trusted() bool { return int(ws.up.Load()) == len(ws.c.nodes) }

// close closes the pub/sub connections, which ends the receive loops.
func (ws *waiters) close() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.closed = true
	if ws.sweep != nil {
		ws.sweep.Stop()
		ws.sweep = nil
	}
	for _, s := range ws.subs {
		_ = s.ps.Close()
	}
}

// await blocks w until it should try again: woken by a release while head,
// or, as head, when its timer (the retry delay, capped at the holder's
// remaining lease) runs out. Waiters behind the head only re-check their
// place when their timer fires.
func (c *core) await(ctx context.Context, channel string, w *waiter, delay time.Duration) error {
	for {
		t := time.NewTimer(delay)
		select {
		case <-w.wake:
			t.Stop()
			return nil
		case <-t.C:
			if c.waits.isHead(channel, w) {
				return nil
			}
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-c.closing:
			t.Stop()
			return ErrClosed
		}
	}
}
