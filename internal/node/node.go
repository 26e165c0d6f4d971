package node

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

// Node is one Redis deployment: the only one of a Locker, one of the N
// independent masters of a Redlock.
type Node struct {
	Idx    int
	Addr   string // the client's String(), for error messages
	Client Client
	// deadlines: the client applies ctx deadlines to its sockets
	// (ContextTimeoutEnabled), so a call on it is bounded without a
	// goroutine of ours watching it.
	deadlines bool
	// Ring: a *redis.Ring, whose pub/sub must be opened per channel, since
	// it shards channels like keys.
	Ring bool
	// Renewing is set while a renewal pipeline to this node is in flight,
	// so a hung node holds one call of the watchdog, not one per period.
	Renewing atomic.Bool

	// Identity of the server behind the client (its INFO run_id), so that
	// one server given twice under two spellings never casts two votes.
	IDMu  sync.Mutex
	RunID string // "" until known
	// ReplID is the replication ID of the server's dataset (INFO
	// replication's master_replid), shared by a master and its synced
	// replicas, and replica says the server is one: a replica listed next
	// to its master would grant the master's keys a second vote.
	ReplID  string
	Replica bool
	// Dup is the index of the node this one duplicates, or -1. Atomic: every
	// tally reads it, on the hot path.
	Dup atomic.Int32
	// Evict is the server's maxmemory-policy, read by the warm-up (evict.go).
	Evict evictionProbe
	// Fixed: the client talks to one address and cannot follow a failover
	// (a plain *redis.Client, a Ring), so READONLY from it is for good.
	Fixed bool
	// LastErr is the error of the node's latest call that failed other than
	// by our deadline, nil after a success: the likely cause that a call
	// with no reply in time names.
	LastErr atomic.Pointer[error]
	// Silent is set when a call on the node got no answer in time (a
	// paused server, a link that swallows what it is sent), cleared by the
	// next answer, an error reply included: a round decided by the other
	// nodes' answers does not wait for it (pool.settled), and a Redlock's
	// acquisitions and releases send it probes only (admit). probed is
	// when the last probe was sent (UnixNano).
	Silent atomic.Bool
	probed atomic.Int64
	// Gated: a Redlock's node, whose calls admit rations while it does not
	// answer (a Locker's one node is waited for in any case). inflight
	// counts its calls on the wire and lastReply is when it last answered
	// one, or went from idle to busy (UnixNano): a node with calls in
	// flight and no answer for stallAfter is treated as silent before any
	// call of it has timed out.
	Gated     bool
	inflight  atomic.Int32
	lastReply atomic.Int64
	// shared is set for a plain *redis.Client that ignores ctx deadlines
	// (go-redis's default): how a call on it is bounded inline.
	shared *DivertedClient
	// cluster is the client when it is a *redis.ClusterClient, whose slot
	// map a call that got no answer has reloaded (see note).
	cluster *redis.ClusterClient
}

// Note records how a call on the node ended (see LastErr).
func (n *Node) Note(err error) {
	switch {
	case err == nil:
		if n.LastErr.Load() != nil {
			n.LastErr.Store(nil)
		}
		n.answered()
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		n.Silence()
		n.reloadSlots()
	case errors.Is(err, context.Canceled):
	default:
		if IsServerError(err) {
			n.answered()
		} else {
			n.reloadSlots()
		}
		e := err // a copy: &err would move the parameter to the heap on every call
		n.LastErr.Store(&e)
	}
}

// reloadSlots has a Cluster client reload its slot map after a call that
// got no answer (a refused connection, a timeout). go-redis reloads it on
// MOVED, ASK and READONLY, which only a live server says, and otherwise once
// a minute (ClusterStateReloadInterval): a master that died, or stopped
// answering, keeps every call of its slots, renewals included, until then,
// although the cluster promoted its replica seconds after. The reload runs
// in go-redis's background, one at a time, 200ms apart at most.
func (n *Node) reloadSlots() {
	if n.cluster != nil {
		n.cluster.ReloadState(context.Background())
	}
}

// Silence marks the node as not answering; answered clears the mark.
// Each reads before it writes: the mark is shared by every round.
func (n *Node) Silence() {
	if !n.Silent.Load() {
		n.Silent.Store(true)
	}
}

func (n *Node) answered() {
	if n.Silent.Load() {
		n.Silent.Store(false)
	}
}

// ProbeEvery is how often a Redlock sends an acquire or release call to a
// node that does not answer: each such call holds a pooled connection until
// the node timeout, and one per attempt (thousands a second from a few
// workers, whose rounds end at the other masters' answers) ran go-redis's
// pool dry, leaving a backlog of calls for attempts long over that a
// healed master worked through, and connections stuck in the black hole
// until their timeout, before the first call that mattered. With one call
// every ProbeEvery, and maxProbes on the wire at most, a few connections
// are tied up, and a healed master is re-admitted by the first probe that
// it answers.
const ProbeEvery = 50 * time.Millisecond

// maxProbes bounds the calls on the wire to a node that does not answer
// (each holds a pooled connection until the node timeout): a few, spread
// over time, so that one of them is sent soon after the node heals.
const maxProbes = 4

// stallAfter is how long a node with calls in flight may go without
// answering any before admit treats it as silent: well under the node
// timeout (1s by default), after which a call of it would say so.
const stallAfter = 100 * time.Millisecond

// Admit reports whether a call of a Redlock round may be sent to n: always
// while it answers; while it is silent or stalled, when fewer than
// maxProbes calls of it are on the wire, and either none is, or they were
// sent within stallAfter, or no probe went out within ProbeEvery. A call
// not sent is not made at all: its caller counts the node as timed out,
// knowing that nothing of its was written there.
func (n *Node) Admit() bool {
	if !n.Gated {
		return true
	}
	now := time.Now().UnixNano()
	if !n.Quiet(now) {
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
	return now-last >= int64(ProbeEvery) && n.probed.CompareAndSwap(last, now)
}

// Quiet reports that n is silent, or stalled (see admit).
func (n *Node) Quiet(now int64) bool {
	return n.Silent.Load() || n.inflight.Load() > 0 && now-n.lastReply.Load() >= int64(stallAfter)
}

// Begin and end bracket a call on a gated node (see admit); end's err is
// the call's.
func (n *Node) Begin() {
	if n.Gated && n.inflight.Add(1) == 1 {
		n.lastReply.Store(time.Now().UnixNano()) // idle until now: the clock starts
	}
}

func (n *Node) End(err error) {
	if !n.Gated {
		return
	}
	if err == nil || IsServerError(err) {
		n.lastReply.Store(time.Now().UnixNano())
	}
	n.inflight.Add(-1)
}

// TimedOut is the error of a call on the node that did not answer in time,
// naming the node's last error when there is one: a refused connection
// that go-redis retried past the deadline, say, which the client's failed
// dials tell when no call has said it yet (see diverter).
func (n *Node) TimedOut() error {
	p := n.LastErr.Load()
	if p == nil && n.shared != nil {
		p = n.shared.dialErr.Load()
	}
	if p != nil {
		return fmt.Errorf("%w (last error: %w)", ErrTimeout, *p)
	}
	return ErrTimeout
}

// Outcome records how a call on the node ended (note) and returns its
// error as the caller is to see it: a call runs on a ctx detached from the
// caller's, so a context.DeadlineExceeded is the library's own bound, the
// node timeout, and must not read as the caller's deadline (errors.Is).
func (n *Node) Outcome(err error) error {
	n.Note(err)
	if err != nil && (errors.Is(err, context.DeadlineExceeded) || isTimeout(err)) {
		return n.TimedOut()
	}
	return err
}

func New(idx int, cl Client) *Node {
	n := &Node{Idx: idx, Client: cl, deadlines: honorsDeadlines(cl)}
	n.Dup.Store(-1)
	if s, ok := cl.(fmt.Stringer); ok {
		n.Addr = s.String()
	}
	_, n.Ring = cl.(*redis.Ring)
	n.cluster, _ = cl.(*redis.ClusterClient)
	if c, ok := cl.(*redis.Client); ok {
		// NewFailoverClient's options carry this placeholder address.
		n.Fixed = c.Options().Addr != FailoverAddr
	}
	n.Fixed = n.Fixed || n.Ring
	if c, ok := cl.(*redis.Client); ok && !n.deadlines {
		n.shared = DivertedOf(c)
	}
	return n
}

// Bounded returns whether a call on the node is bounded by timeout without
// a goroutine of ours watching it, and whether the ctx must then carry that
// deadline. With ContextTimeoutEnabled the client turns the ctx deadline
// into socket deadlines. A plain *redis.Client's scripts run on its clone
// whose socket timeouts are timeout (see DivertedClient); its dial and its
// wait for a free connection of a full pool are bounded by DialTimeout
// (times DialerRetries, 100ms apart, on a refused connection) and
// PoolTimeout (by default ReadTimeout + 1s), which go-redis ends at the ctx
// deadline whatever ContextTimeoutEnabled says: the ctx carries one unless
// those are within timeout. Other clients are called from a goroutine.
func (n *Node) Bounded(timeout time.Duration) (withDeadline, ok bool) {
	if n.deadlines {
		return true, true
	}
	if n.shared == nil {
		return false, false
	}
	opt := n.Client.(*redis.Client).Options()
	within := func(d time.Duration) bool { return d > 0 && d <= timeout }
	return !within(opt.PoolTimeout) || !within(opt.DialTimeout) || opt.DialerRetries > 1, true
}

// ClientFor is the node's client for a call bounded by timeout (see
// bounded), inline or a cleanup's: a call whose ctx deadline go-redis
// ignores (no ContextTimeoutEnabled) would wait for the client's read
// timeout (3s by default) on a link that swallows it, so a plain
// *redis.Client's scripts and pipelines run on its clone bounded by
// timeout. Other clients bound the call by the ctx deadline when they
// honour it, else by their own timeouts.
func (n *Node) ClientFor(timeout time.Duration) Client {
	if n.shared != nil {
		return n.shared.bounded(timeout)
	}
	return n.Client
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

func IsNil(cl Client) bool {
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

func SamePointer(a, b Client) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	return va.Kind() == reflect.Pointer && vb.Kind() == reflect.Pointer && va.Type() == vb.Type() && va.Pointer() == vb.Pointer()
}

// ServerKey names the server a single-server client talks to, without the
// DB (two DBs of one server are one failure domain), or "" when the client
// is not of that kind.
func ServerKey(cl Client) string {
	if o, ok := cl.(interface{ Options() *redis.Options }); ok && o.Options().Addr != "" {
		return o.Options().Network + "/" + o.Options().Addr
	}
	return ""
}

// Identifiable reports whether the client talks to one server whose INFO
// names it: not a Cluster or Ring, where INFO reaches an arbitrary shard.
func Identifiable(cl Client) bool {
	_, ok := cl.(interface{ Options() *redis.Options })
	return ok
}

// CallClient is the client a spawned call on n runs on: with a node
// timeout (bound > 0), n.clientFor(bound), so that a call into a link that
// swallows it gives its pooled connection back at the node timeout, not
// at go-redis's read timeout (3s by default): the fan-out of a Redlock
// round with one master in a black hole otherwise took a connection per
// attempt for 3s, and the pool ran dry. A call allowed longer than the
// node timeout (a renewal pipeline, which waits up to its locks' validity
// and of which one per node is in flight) runs on the client itself.
func CallClient(n *Node, bound time.Duration) Client {
	if bound > 0 {
		return n.ClientFor(bound)
	}
	return n.Client
}

func (n *Node) IsDup() bool { return n.Dup.Load() >= 0 }
