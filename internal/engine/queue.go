package engine

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redlockgo/redlock/internal/pubsub"
	"github.com/redlockgo/redlock/internal/scripts"
)

// Waiting for a contended lock.
//
// Every release publishes the released owner on "<lock key>:rel" from inside
// the release script. A core keeps ONE pub/sub connection per node (per
// channel on a Ring, which shards channels like keys, and on a Cluster, where
// each channel lives on its slot's shard: see internal/pubsub), opened with the
// first waiter and kept until Close, and subscribes a name's channel while at
// least one goroutine waits for that name (and, once contended, while this
// core holds it, and for IdleGrace after). A Lock that gets the lock at its
// first attempt never touches pub/sub. Waiters of one core queue per name in
// arrival order. An Unlock of the same core hands the lock to the head of
// the queue directly (handoff.lua: release and grant in one script, nothing
// published); otherwise a release message wakes only the head of the queue,
// or only the waiter the name was passed to, so a hand-off costs one
// acquire per process, not one per waiting goroutine. A
// Redlock receives one copy per master; copies with an owner already seen
// are dropped.
//
// Fairness: FIFO within a core: a Lock call does not try at once while the
// name is held by this core, other goroutines already wait for it, or
// another call's first attempt at it is on the wire (heldNames.tryFirst);
// it joins the tail, and that other call, refused, joins ahead of it. So a
// goroutine that unlocks and locks again goes behind
// those already waiting. Across the cores of a Locker (processes), the head
// waiter of each core enters the server-side queue of waiting writers at
// its refused attempts (see _lib.lua), a release passes the name to the
// first live entry ("queued:<id>") and publishes "w:<id>", which wakes
// only that waiter (dispatch), and a hand-off inside a core happens only
// when no other core queued first, and at most maxHandOffs times in a row.
// A Redlock keeps no such queue and hands nothing off: whoever's acquire
// reaches a quorum first after a release wins.
//
// Messages can be lost (the connection drops, a holder crashes without
// releasing, a lock is lost rather than released), and a connection that
// reads without error can still hear nothing: after a Sentinel failover
// go-redis moves command connections to the new master but leaves pub/sub
// connections on the old one. So the head waiter also wakes on a timer: the
// retry policy's delay, capped at the moment the holder's lease runs out,
// and, while it trusts messages, at MaxTrustedSleep. A head that wakes by
// that timer and then gets the lock before the holder's lease would have
// ended has proof that a release went unheard: the core re-homes its pub/sub
// connections (closes them and opens new ones, which go-redis dials to the
// current master), at most once per rehomeGap.
//
// The hand-off is in queue_handoff.go, the wake-ups by release messages in
// queue_dispatch.go, the unsubscribing of idle channels in queue_idle.go.
type waiters struct {
	PS     *pubsub.Conns // the transport that wakes them (internal/pubsub)
	Mu     sync.Mutex
	Queues map[string]*waitQueue // by queue key (see QueueKey)
	closed bool                  // set by close
	sweep  *time.Timer           // unsubscribes idle channels; nil when none are idle
	held   *heldNames            // the core's: a contended name stays subscribed while held
	// msgs counts, per channel, the release messages that woke every head,
	// and unclaimed is the last id a passed name was for that no waiter
	// here had: so that a Lock call can tell whether one for it came between
	// its refused attempt and its joining the queue, when nobody was there
	// to wake.
	msgs      map[string]uint64
	unclaimed map[string]string
	// firm is, per channel, the owner that the latest refused attempt found
	// holding the name on a quorum of nodes: until that owner's release, a
	// release message of any other owner (a failed attempt withdrawing its
	// grants, retract.lua) cannot free a quorum, and wakes nobody.
	firm map[string]string
}

func newWaiters(held *heldNames) *waiters {
	return &waiters{Queues: make(map[string]*waitQueue), held: held, msgs: make(map[string]uint64), unclaimed: make(map[string]string), firm: make(map[string]string)}
}

type waitQueue struct {
	List      []*waiter
	idleSince time.Time // zero while waited on or held; else when that stopped
	lastOwner string    // the release last dispatched; N copies from a Redlock wake once
	// handOffs counts the Unlocks in a row that handed the name to a waiter
	// of this core; at maxHandOffs the next Unlock releases it instead.
	handOffs int
}

// remove takes w out of q, if it is there (ws.mu held).
func (q *waitQueue) remove(w *waiter) {
	for i, x := range q.List {
		if x == w {
			q.List = append(q.List[:i], q.List[i+1:]...)
			return
		}
	}
}

// wakeHead wakes the head of q, if anybody waits (ws.mu held).
func (q *waitQueue) wakeHead() {
	if len(q.List) > 0 {
		notify(q.List[0])
	}
}

type waiter struct {
	wake   chan struct{} // buffered 1: a release arrived while this waiter was head
	Handed chan *Hold    // buffered 1: an Unlock of this core handed the lock over
	name   string
	cfg    *Config // the options of its Lock call, for a lock handed to it
	WID    string  // its id among the name's waiting writers (acquire.lua), or ""
	// gone is its Lock call's ctx.Done(): closed once the caller gave up,
	// maybe before the call has returned and left the queue. Such a waiter
	// is never handed a lock.
	gone <-chan struct{}
	// Guarded by ws.mu: an Unlock is handing the lock to it; it left; an
	// attempt of its own is on the wire. A hand-off never overlaps an
	// attempt: the attempt, refused, would enter it in the server's queue
	// again after the hand-off took it out.
	reserved, left, attempting bool
}

// Queues. The waiters of one release channel queue apart by what they wait
// for, so that no waiter waits in line behind one that wants something else:
// writers (Lock) in the queue keyed by the channel itself, which is the only
// one Unlock hands a name off from; read holds (RLock), a semaphore's
// permits and multi-name locks (LockAll) each in a queue of their own,
// keyed by the channel and a suffix. One release message wakes the head of
// every queue of its channel, and in the queues other than the writers' a
// head that got what it waited for wakes the next (readers share, a release
// may free more than one permit).
const (
	QueueReaders = "#r"
	QueuePermits = "#s"
	QueueMulti   = "#m"
)

var queueSuffixes = [...]string{"", QueueReaders, QueuePermits, QueueMulti}

// QueueKey is the key of the queue of channel for waiters of one kind
// (suffix "" for writers). Channels end with scripts.ChannelSuffix, so the key says
// which it is.
func QueueKey(channel, suffix string) string { return channel + suffix }

// queueOf is the queue of channel for waiters of one kind, or nil; it
// builds the key in a stack buffer, since Unlock looks on every release.
// Under ws.mu.
func (ws *waiters) queueOf(channel, suffix string) *waitQueue {
	if suffix == "" {
		return ws.Queues[channel]
	}
	var buf [128]byte
	return ws.Queues[string(append(append(buf[:0], channel...), suffix...))]
}

// channelOf is the release channel of a queue key.
func channelOf(qk string) string {
	if strings.HasSuffix(qk, scripts.ChannelSuffix) {
		return qk
	}
	return qk[:len(qk)-len(QueueReaders)]
}

// sharedQueue reports a queue whose head, once served, wakes the next.
func sharedQueue(qk string) bool { return !strings.HasSuffix(qk, scripts.ChannelSuffix) }

// otherQueues reports whether a queue of qk's channel other than qk exists,
// which keeps the channel subscribed. Under ws.mu.
func (ws *waiters) otherQueues(qk string) bool {
	ch := channelOf(qk)
	for _, suffix := range queueSuffixes {
		if q := ws.queueOf(ch, suffix); q != nil && QueueKey(ch, suffix) != qk {
			return true
		}
	}
	return false
}

// Join queues a waiter for channel at the tail (at the head when front),
// subscribing the channel on every node if it is the first. It returns a channel that receives once per
// node whose SUBSCRIBE was sent (nil when nothing was sent): the caller waits
// for a quorum of them, bounded by the node timeout and its ctx, before its
// next attempt, so that a release right after that attempt is not missed,
// and a hung node delays nothing.
func (ws *waiters) Join(qk, name, wid string, cfg *Config, gone <-chan struct{}, front bool) (*waiter, <-chan struct{}) {
	w := &waiter{wake: make(chan struct{}, 1), Handed: make(chan *Hold, 1), name: name, cfg: cfg, WID: wid, gone: gone}
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	q := ws.Queues[qk]
	var sent <-chan struct{}
	if q == nil {
		q = &waitQueue{}
		ch := channelOf(qk)
		if !ws.otherQueues(qk) {
			sent = ws.PS.Subscribe(ch)
		}
		if _, ok := ws.msgs[ch]; !ok {
			ws.msgs[ch] = 0 // counted from now until unsubscribed (Dispatch)
		}
		ws.Queues[qk] = q
	}
	q.idleSince = time.Time{}
	if front {
		q.List = slices.Insert(q.List, 0, w)
	} else {
		q.List = append(q.List, w)
	}
	return w, sent
}

// Leave removes w. A waiter that leaves without the lock (ctx ended) hands a
// wake-up it had not used yet to the new head; one that got the lock drops
// it (that release came before its own acquisition), except in a shared
// queue, whose next head may get in too.
func (ws *waiters) Leave(qk string, w *waiter, acquired bool) {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	w.left = true
	q := ws.Queues[qk]
	if q == nil {
		return
	}
	q.remove(w)
	if len(q.List) == 0 {
		ws.dropIfIdle(qk, q)
		return
	}
	if acquired && sharedQueue(qk) {
		notify(q.List[0])
		return
	}
	select {
	case <-w.wake:
		if !acquired {
			notify(q.List[0])
		}
	default:
	}
}

// Busy reports whether a new Lock call for channel should queue without
// trying because others wait already (the caller also checks whether this
// core holds the name).
func (ws *waiters) Busy(qk string) bool {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	q := ws.Queues[qk]
	return q != nil && len(q.List) > 0
}

// startAttempt reports whether w, at the head of its queue and not being
// (or just) handed the lock, may make an attempt now, and marks it
// attempting. A writer waits while the first attempt of a call that came
// before it is on the wire (see obtaining.run).
func (ws *waiters) startAttempt(qk string, w *waiter) bool {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	q := ws.Queues[qk]
	if q == nil || len(q.List) == 0 || q.List[0] != w {
		return false
	}
	if !sharedQueue(qk) && ws.held.firstOnWire(heldKey(channelOf(qk))) {
		return false
	}
	return w.startAttempt()
}

// wokenAttempt marks w, woken by a message, attempting (head or not: a
// name passed to it is reserved for it), unless an Unlock is handing it the
// lock or has handed it (await's select may pick the wake-up first).
func (ws *waiters) wokenAttempt(w *waiter) bool {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	return w.startAttempt()
}

// startAttempt marks w attempting, unless an Unlock is handing it the lock
// or has handed it: a hand-off never overlaps an attempt (ws.mu held).
func (w *waiter) startAttempt() bool {
	if w.reserved || len(w.Handed) > 0 {
		return false
	}
	w.attempting = true
	return true
}

// doneAttempting marks w's attempt answered.
func (ws *waiters) doneAttempting(w *waiter) {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	w.attempting = false
}

func notify(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// close stops the idle sweep and closes the pub/sub transport (see
// pubsub.Conns.Close); it waits for nothing (Close bounds its wait).
func (ws *waiters) close() {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	ws.closed = true
	if ws.sweep != nil {
		ws.sweep.Stop()
		ws.sweep = nil
	}
	ws.PS.Close()
}
