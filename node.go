package redlock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// node is one Redis deployment: the only one of a Locker, one of the N
// independent masters of a Redlock.
type node struct {
	idx    int
	addr   string // the client's String(), for error messages
	client Client
	// deadlines: the client applies ctx deadlines to its sockets
	// (ContextTimeoutEnabled), so a call on it is bounded without a
	// goroutine of ours watching it.
	deadlines bool
	// ring: a *redis.Ring, whose pub/sub must be opened per channel, since
	// it shards channels like keys.
	ring bool
	// renewing is set while a renewal pipeline to this node is in flight,
	// so a hung node holds one call of the watchdog, not one per period.
	renewing atomic.Bool

	// Identity of the server behind the client (its INFO run_id), so that
	// one server given twice under two spellings never casts two votes.
	idMu  sync.Mutex
	runID string // "" until known
	// replID is the replication ID of the server's dataset (INFO
	// replication's master_replid), shared by a master and its synced
	// replicas, and replica says the server is one: a replica listed next
	// to its master would grant the master's keys a second vote.
	replID  string
	replica bool
	// dup is the index of the node this one duplicates, or -1. Atomic: every
	// tally reads it, on the hot path.
	dup atomic.Int32
	// evict is the server's maxmemory-policy, read by the warm-up (evict.go).
	evict evictionProbe
	// fixed: the client talks to one address and cannot follow a failover
	// (a plain *redis.Client, a Ring), so READONLY from it is for good.
	fixed bool
	// lastErr is the error of the node's latest call that failed other than
	// by our deadline, nil after a success: the likely cause that a call
	// with no reply in time names.
	lastErr atomic.Pointer[error]
	// silent is set when a call on the node got no answer in time (a
	// paused server, a link that swallows what it is sent), cleared by the
	// next answer, an error reply included: a round decided by the other
	// nodes' answers does not wait for it (pool.settled), and a Redlock's
	// acquisitions and releases send it probes only (admit). probed is
	// when the last probe was sent (UnixNano).
	silent atomic.Bool
	probed atomic.Int64
	// gated: a Redlock's node, whose calls admit rations while it does not
	// answer (a Locker's one node is waited for in any case). inflight
	// counts its calls on the wire and lastReply is when it last answered
	// one, or went from idle to busy (UnixNano): a node with calls in
	// flight and no answer for stallAfter is treated as silent before any
	// call of it has timed out.
	gated     bool
	inflight  atomic.Int32
	lastReply atomic.Int64
	// shared is set for a plain *redis.Client that ignores ctx deadlines
	// (go-redis's default): how a call on it is bounded inline.
	shared *divertedClient
	// cluster is the client when it is a *redis.ClusterClient, whose slot
	// map a call that got no answer has reloaded (see note).
	cluster *redis.ClusterClient
}

// note records how a call on the node ended (see lastErr).
func (n *node) note(err error) {
	switch {
	case err == nil:
		if n.lastErr.Load() != nil {
			n.lastErr.Store(nil)
		}
		n.answered()
	case errors.Is(err, errNodeTimeout), errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		n.silence()
		n.reloadSlots()
	case errors.Is(err, context.Canceled):
	default:
		if isServerError(err) {
			n.answered()
		} else {
			n.reloadSlots()
		}
		e := err // a copy: &err would move the parameter to the heap on every call
		n.lastErr.Store(&e)
	}
}

// reloadSlots has a Cluster client reload its slot map after a call that
// got no answer (a refused connection, a timeout). go-redis reloads it on
// MOVED, ASK and READONLY, which only a live server says, and otherwise once
// a minute (ClusterStateReloadInterval): a master that died, or stopped
// answering, keeps every call of its slots, renewals included, until then,
// although the cluster promoted its replica seconds after. The reload runs
// in go-redis's background, one at a time, 200ms apart at most.
func (n *node) reloadSlots() {
	if n.cluster != nil {
		n.cluster.ReloadState(context.Background())
	}
}

// silence marks the node as not answering; answered clears the mark.
// Each reads before it writes: the mark is shared by every round.
func (n *node) silence() {
	if !n.silent.Load() {
		n.silent.Store(true)
	}
}

func (n *node) answered() {
	if n.silent.Load() {
		n.silent.Store(false)
	}
}

// probeEvery is how often a Redlock sends an acquire or release call to a
// node that does not answer: each such call holds a pooled connection until
// the node timeout, and one per attempt (thousands a second from a few
// workers, whose rounds end at the other masters' answers) ran go-redis's
// pool dry, leaving a backlog of calls for attempts long over that a
// healed master worked through, and connections stuck in the black hole
// until their timeout, before the first call that mattered. With one call
// every probeEvery, and maxProbes on the wire at most, a few connections
// are tied up, and a healed master is re-admitted by the first probe that
// it answers.
const probeEvery = 50 * time.Millisecond

// maxProbes bounds the calls on the wire to a node that does not answer
// (each holds a pooled connection until the node timeout): a few, spread
// over time, so that one of them is sent soon after the node heals.
const maxProbes = 4

// stallAfter is how long a node with calls in flight may go without
// answering any before admit treats it as silent: well under the node
// timeout (1s by default), after which a call of it would say so.
const stallAfter = 100 * time.Millisecond

// admit reports whether a call of a Redlock round may be sent to n: always
// while it answers; while it is silent or stalled, when fewer than
// maxProbes calls of it are on the wire, and either none is, or they were
// sent within stallAfter, or no probe went out within probeEvery. A call
// not sent is not made at all: its caller counts the node as timed out,
// knowing that nothing of its was written there.
func (n *node) admit() bool {
	if !n.gated {
		return true
	}
	now := time.Now().UnixNano()
	if !n.quiet(now) {
		return true
	}
	inflight := n.inflight.Load()
	switch {
	case inflight >= maxProbes:
		return false
	case inflight == 0, now-n.lastReply.Load() < int64(stallAfter):
		// Nothing on the wire, or only calls sent a moment ago (a node that
		// has just come back is answering them): this one goes too.
		n.probed.Store(now)
		return true
	}
	last := n.probed.Load()
	return now-last >= int64(probeEvery) && n.probed.CompareAndSwap(last, now)
}

// quiet reports that n is silent, or stalled (see admit).
func (n *node) quiet(now int64) bool {
	return n.silent.Load() || n.inflight.Load() > 0 && now-n.lastReply.Load() >= int64(stallAfter)
}

// begin and end bracket a call on a gated node (see admit); end's err is
// the call's.
func (n *node) begin() {
	if n.gated && n.inflight.Add(1) == 1 {
		n.lastReply.Store(time.Now().UnixNano()) // idle until now: the clock starts
	}
}

func (n *node) end(err error) {
	if !n.gated {
		return
	}
	if err == nil || isServerError(err) {
		n.lastReply.Store(time.Now().UnixNano())
	}
	n.inflight.Add(-1)
}

// timedOut is the error of a call on the node that did not answer in time,
// naming the node's last error when there is one: a refused connection
// that go-redis retried past the deadline, say, which the client's failed
// dials tell when no call has said it yet (see diverter).
func (n *node) timedOut() error {
	p := n.lastErr.Load()
	if p == nil && n.shared != nil {
		p = n.shared.dialErr.Load()
	}
	if p != nil {
		return fmt.Errorf("%w (last error: %w)", errNodeTimeout, *p)
	}
	return errNodeTimeout
}

// outcome records how a call on the node ended (note) and returns its
// error as the caller is to see it: a call runs on a ctx detached from the
// caller's, so a context.DeadlineExceeded is the library's own bound, the
// node timeout, and must not read as the caller's deadline (errors.Is).
func (n *node) outcome(err error) error {
	n.note(err)
	if err != nil && (errors.Is(err, context.DeadlineExceeded) || isTimeout(err)) {
		return n.timedOut()
	}
	return err
}

func newNode(idx int, cl Client) *node {
	n := &node{idx: idx, client: cl, deadlines: honorsDeadlines(cl)}
	n.dup.Store(-1)
	if s, ok := cl.(fmt.Stringer); ok {
		n.addr = s.String()
	}
	_, n.ring = cl.(*redis.Ring)
	n.cluster, _ = cl.(*redis.ClusterClient)
	if c, ok := cl.(*redis.Client); ok {
		// NewFailoverClient's options carry this placeholder address.
		n.fixed = c.Options().Addr != failoverAddr
	}
	n.fixed = n.fixed || n.ring
	if c, ok := cl.(*redis.Client); ok && !n.deadlines {
		n.shared = divertedOf(c)
	}
	return n
}

// bounded returns whether a call on the node is bounded by timeout without
// a goroutine of ours watching it, and whether the ctx must then carry that
// deadline. With ContextTimeoutEnabled the client turns the ctx deadline
// into socket deadlines. A plain *redis.Client's scripts run on its clone
// whose socket timeouts are timeout (see divertedClient); its dial and its
// wait for a free connection of a full pool are bounded by DialTimeout
// (times DialerRetries, 100ms apart, on a refused connection) and
// PoolTimeout (by default ReadTimeout + 1s), which go-redis ends at the ctx
// deadline whatever ContextTimeoutEnabled says: the ctx carries one unless
// those are within timeout. Other clients are called from a goroutine.
func (n *node) bounded(timeout time.Duration) (withDeadline, ok bool) {
	if n.deadlines {
		return true, true
	}
	if n.shared == nil {
		return false, false
	}
	opt := n.client.(*redis.Client).Options()
	within := func(d time.Duration) bool { return d > 0 && d <= timeout }
	return !within(opt.PoolTimeout) || !within(opt.DialTimeout) || opt.DialerRetries > 1, true
}

// clientFor is the node's client for a call bounded by timeout (see
// bounded), inline or a cleanup's: a call whose ctx deadline go-redis
// ignores (no ContextTimeoutEnabled) would wait for the client's read
// timeout (3s by default) on a link that swallows it, so a plain
// *redis.Client's scripts and pipelines run on its clone bounded by
// timeout. Other clients bound the call by the ctx deadline when they
// honour it, else by their own timeouts.
func (n *node) clientFor(timeout time.Duration) Client {
	if n.shared != nil {
		return n.shared.bounded(timeout)
	}
	return n.client
}

func honorsDeadlines(cl Client) bool {
	switch c := cl.(type) {
	case interface{ Options() *redis.Options }:
		return c.Options().ContextTimeoutEnabled
	case interface{ Options() *redis.ClusterOptions }:
		return c.Options().ContextTimeoutEnabled
	case interface{ Options() *redis.RingOptions }:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

func isNil(cl Client) bool {
	if cl == nil {
		return true
	}
	v := reflect.ValueOf(cl)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}

func samePointer(a, b Client) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	return va.Kind() == reflect.Pointer && vb.Kind() == reflect.Pointer && va.Type() == vb.Type() && va.Pointer() == vb.Pointer()
}

// serverKey names the server a single-server client talks to, without the
// DB (two DBs of one server are one failure domain), or "" when the client
// is not of that kind.
func serverKey(cl Client) string {
	if o, ok := cl.(interface{ Options() *redis.Options }); ok && o.Options().Addr != "" {
		return o.Options().Network + "/" + o.Options().Addr
	}
	return ""
}

// identifiable reports whether the client talks to one server whose INFO
// names it: not a Cluster or Ring, where INFO reaches an arbitrary shard.
func identifiable(cl Client) bool {
	_, ok := cl.(interface{ Options() *redis.Options })
	return ok
}

// callClient is the client a spawned call on n runs on: with a node
// timeout (bound > 0), n.clientFor(bound), so that a call into a link that
// swallows it gives its pooled connection back at the node timeout, not
// at go-redis's read timeout (3s by default): the fan-out of a Redlock
// round with one master in a black hole otherwise took a connection per
// attempt for 3s, and the pool ran dry. A call allowed longer than the
// node timeout (a renewal pipeline, which waits up to its locks' validity
// and of which one per node is in flight) runs on the client itself.
func callClient(n *node, bound time.Duration) Client {
	if bound > 0 {
		return n.clientFor(bound)
	}
	return n.client
}

func (n *node) isDup() bool { return n.dup.Load() >= 0 }
