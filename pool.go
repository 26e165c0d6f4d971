package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reasons a node did not grant or answer; they travel inside a NodeError.
var (
	errTaken       = errors.New("held by another owner")
	errNodeTimeout = errors.New("no reply within the node timeout")
	errNodeBusy    = errors.New("the previous renewal on this node has not answered yet")
	errBadReply    = errors.New("unexpected script reply")
	errDuplicate   = errors.New("same server as another node of this Redlock")
)

// pool is the nodes of a core and the one quorum round that every
// operation runs over them: send to every node (from the caller's goroutine
// when one node bounds the call itself, else one goroutine per node),
// gather the replies until the outcome is settled or the node timeout
// passes, tally them, and build the one error of a round that fell short.
// It knows nothing of held locks or waiters; the cleanup calls that must
// reach every node (releaseOn, releaseInBackground) live here too.
type pool struct {
	nodes  []*node
	quorum int
	life   *lifecycle
	ids    idents
}

// idents tells apart the servers behind the nodes: a Redlock node's vote
// counts only once its server's run_id is known, and never when another
// node of the pool reaches the same server.
type idents struct {
	mu    sync.Mutex // serialises the duplicate checks
	nodes []*node    // the pool's
}

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

// spare reports whether a round can do without n's call when admit refuses
// it: the other nodes that answer make a quorum by themselves. When they do
// not, the round needs n's vote and waits for it anyway (up to the node
// timeout), so its call goes: it cannot pile up behind rounds that end
// without it.
func (p *pool) spare(n *node) bool {
	now := time.Now().UnixNano()
	others := 0
	for _, o := range p.nodes {
		if o != n && !o.isDup() && !o.quiet(now) {
			others++
		}
	}
	return others >= p.quorum
}

// send reports whether a round's call of an acquisition or release goes to
// n (admit), or is left out, the round doing without it (spare).
func (p *pool) send(n *node) bool { return n.admit() || !p.spare(n) }

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

// isTimeout reports a socket deadline that fired (a clone bounded by the
// node timeout, see clientFor): no answer in time.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
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

// warmUp dials the node and loads the scripts, so that a first call is not
// judged by a budget that a dial and a NOSCRIPT round trip already spent.
// With identify it also reads the server's run_id, and reports whether it
// learnt it. It reads the maxmemory-policy for the constructor's warning.
// Errors are ignored: a node that is down now is dialled again by
// the first call that needs it.
func (n *node) warmUp(ctx context.Context, identify bool) (identified bool) {
	if identify {
		if id, err := fetchRunID(ctx, n.client); err == nil {
			n.setIdentity(id)
			identified = true
		}
	}
	for _, s := range allScripts {
		err := s.Load(ctx, n.client).Err()
		n.note(err) // a refused dial is what the first call's timeout will name
		if err != nil {
			break
		}
	}
	n.evict.probe(ctx, n.client)
	return identified
}

// fetchRunID reads who the server is through a one-call pipeline (the
// Client interface asks for no more than that): INFO server's run_id, and
// INFO replication's role and master_replid.
func fetchRunID(ctx context.Context, cl Client) (serverID, error) {
	pipe := cl.Pipeline()
	srv := pipe.Info(ctx, "server")
	repl := pipe.Info(ctx, "replication")
	if _, err := pipe.Exec(ctx); err != nil {
		if isServerError(err) {
			// The server will not say who it is (an ACL user without
			// +info, a server that does not implement INFO server): it
			// cannot be told apart from the others, so it is taken as
			// distinct rather than never allowed to vote.
			return serverID{runID: unidentified}, nil
		}
		return serverID{}, err
	}
	var id serverID
	for line := range strings.Lines(srv.Val() + repl.Val()) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			id.runID = v
		} else if v, ok := strings.CutPrefix(line, "master_replid:"); ok {
			id.replID = v
		} else if v, ok := strings.CutPrefix(line, "role:"); ok {
			id.replica = v != "master"
		}
	}
	if id.runID == "" {
		return serverID{}, fmt.Errorf("%w: INFO server without run_id", errBadReply)
	}
	return id, nil
}

// serverID is what fetchRunID learns.
type serverID struct {
	runID, replID string
	replica       bool
}

// unidentified stands for the run_id of a server that refuses INFO.
const unidentified = "?"

func (n *node) setIdentity(id serverID) {
	n.idMu.Lock()
	n.runID, n.replID, n.replica = id.runID, id.replID, id.replica
	n.idMu.Unlock()
}

// sameDataset reports whether n and o are one server, or a master and its
// replica (one replication ID), and which of them must not vote: the
// replica, else the later in the client list. why says which, for the error.
func sameDataset(n, o *node) (same bool, second *node, why string) {
	n.idMu.Lock()
	nid, nrepl, nreplica := n.runID, n.replID, n.replica
	n.idMu.Unlock()
	o.idMu.Lock()
	oid, orepl, oreplica := o.runID, o.replID, o.replica
	o.idMu.Unlock()
	if nid == "" || nid == unidentified || oid == "" || oid == unidentified {
		return false, nil, ""
	}
	if nid != oid && (nrepl == "" || nrepl != orepl) {
		return false, nil, ""
	}
	why = "reach one server (run_id " + nid + ")"
	if nid != oid {
		why = "share one dataset: one is a replica of the other (replication ID " + nrepl + ")"
	}
	switch {
	case nreplica && !oreplica:
		return true, n, why
	case oreplica && !nreplica:
		return true, o, why
	case n.idx > o.idx:
		return true, n, why
	}
	return true, o, why
}

func (n *node) identity() (runID string, dup int) {
	n.idMu.Lock()
	defer n.idMu.Unlock()
	return n.runID, int(n.dup.Load())
}

// reply is one node's answer to one script call.
type reply struct {
	node int
	ok   bool  // the script said yes (granted, released, extended, raised)
	code int64 // the script's status, by script
	val  int64 // token or PTTL, by script
	// holder is the value of the key when acquire.lua found another owner.
	holder string
	// codes holds per-lock results of a pipelined batch (see batch).
	codes []int8
	// inspected is inspect.lua's answer (see inspect.go).
	inspected *nodeHolder
	err       error
	// unsent: the call was not made (node.admit), err says the node is
	// silent.
	unsent bool
}

// inline reports whether a round calls nodes from the caller's goroutine,
// and whether with a ctx deadline (see callInline). Only when nothing can
// end the caller's wait: neither the ctx the call runs on nor done, the
// caller's own ctx that a detached call leaves behind. go-redis turns a ctx
// deadline into a socket deadline but does not interrupt a read on
// cancellation, so a cancellable caller needs the goroutine path for gather
// to stop waiting at once: a Lock whose ctx ends returns then, and the
// grant that arrives later is released by its own call (Lock.settle).
func inline(ctx context.Context, done <-chan struct{}, nodes []*node, timeout time.Duration) (withDeadline, ok bool) {
	if len(nodes) != 1 || ctx.Done() != nil || done != nil {
		return false, false
	}
	return nodes[0].bounded(timeout)
}

// fan is one round of fanOut's goroutines: one per node, all sharing ctx.
type fan struct {
	life    *lifecycle
	ctx     context.Context
	cancel  context.CancelFunc
	nodes   []*node
	call    func(context.Context, *node, Client) reply
	ch      chan reply
	timeout time.Duration // the node timeout, when the calls are bounded by it (see callClient); else 0
	next    atomic.Int32  // index in nodes of the next goroutine's node
	left    atomic.Int32  // calls not finished yet
}

func (f *fan) client(n *node) Client { return callClient(n, f.timeout) }

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

func (f *fan) run() {
	defer f.life.wg.Done()
	n := f.nodes[f.next.Add(1)-1]
	n.begin()
	r := f.call(f.ctx, n, f.client(n))
	n.end(r.err)
	r.err = n.outcome(r.err)
	if f.left.Add(-1) == 0 {
		f.cancel()
	}
	r.node = n.idx
	f.ch <- r
}

// detached is context.WithoutCancel(ctx), without its allocation when ctx
// can never be cancelled and has no deadline (context.Background, or a ctx
// already detached): there is nothing to detach from.
func detached(ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); !ok && ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

func (n *node) isDup() bool { return n.dup.Load() >= 0 }

// isServerError reports an error reply from Redis (as opposed to a network
// failure or a timeout).
func isServerError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// isPermanent tells a refusal that no retry can get past (wrong password,
// missing permission, wrong key type, out of memory, a script error, a closed
// client) from a failure that a retry may get past (timeouts, dropped
// connections, a loading, read-only or failing-over server). Lock gives up at
// once on a permanent one.
func isPermanent(err error) bool {
	switch {
	case errors.Is(err, redis.ErrClosed), errors.Is(err, errTokenSpace), errors.Is(err, errDuplicate), errors.Is(err, errPermits):
		return true
	case errors.Is(err, errNodeTimeout), errors.Is(err, errNodeBusy),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return false
	}
	if !isServerError(err) {
		return isProtocolError(err)
	}
	if _, moved := redis.IsMovedError(err); moved {
		return false
	}
	if _, ask := redis.IsAskError(err); ask {
		return false
	}
	transient := redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsClusterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsMasterDownError(err) || redis.IsMaxClientsError(err) ||
		redis.IsNoReplicasError(err) || redis.HasErrorPrefix(err, "BUSY")
	return !transient
}

// isProtocolError reports a reply that is not Redis's protocol: the port
// belongs to another server (an HTTP server answers HELLO with a status
// line). go-redis has no classifier for its reader's errors; these are its
// texts.
func isProtocolError(err error) bool {
	s := err.Error()
	return strings.Contains(s, "redis: can't parse") || strings.Contains(s, "redis: invalid reply")
}

// isNoScript reports that a script is not in the server's cache, however a
// hook wrapped the error.
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// gather reads replies from ch until stop says enough, every node answered,
// the deadline passed, or done closed. Nodes that did not answer get an
// errNodeTimeout reply. It reports whether done ended the wait.
func gather(ch <-chan reply, nodes []*node, deadline time.Time, done <-chan struct{}, stop func([]reply) bool) (got []reply, interrupted bool) {
	got = make([]reply, 0, len(nodes))
	// Replies already there (an inline call) need no timer.
	for len(got) < len(nodes) && len(ch) > 0 && !stop(got) {
		got = append(got, <-ch)
	}
	if len(got) == len(nodes) || stop(got) {
		return got, false
	}
	start := time.Now()
	t := getTimer(time.Until(deadline))
	defer putTimer(t)
	var grace <-chan time.Time // see silentGrace
	for len(got) < len(nodes) && !stop(got) {
		if grace == nil && len(got) > 0 && onlySilentLeft(got, nodes) {
			g := time.NewTimer(silentGrace(time.Since(start)))
			defer g.Stop()
			grace = g.C
		}
		select {
		case r := <-ch:
			got = append(got, r)
		case <-t.C:
			return timedOutRest(got, nodes, true), false
		case <-grace:
			return timedOutRest(got, nodes, false), false
		case <-done:
			return got, true
		}
	}
	return got, false
}

// timedOutRest adds to got a timed-out reply for every node it lacks,
// marking those nodes silent when silence is set.
func timedOutRest(got []reply, nodes []*node, silence bool) []reply {
	for _, n := range nodes {
		if _, ok := replyOf(got, n.idx); !ok {
			if silence {
				n.silence()
			}
			got = append(got, reply{node: n.idx, err: n.timedOut()})
		}
	}
	return got
}

// onlySilentLeft reports that every node without a reply in got did not
// answer its last call either (node.silent).
func onlySilentLeft(got []reply, nodes []*node) bool {
	for _, n := range nodes {
		if _, ok := replyOf(got, n.idx); !ok && !n.silent.Load() {
			return false
		}
	}
	return true
}

// silentGrace is how long a round whose other nodes have answered, after
// elapsed, still waits for nodes that did not answer their last call (a
// paused master, a silent link): not the whole node timeout, which stalled
// every round of a Redlock with one hung master of three; but enough for a
// node that came back to answer as fast as the others did (its answer
// clears the mark). A node cut off this way counts as timed out; its late
// answer is handled as any other (a late grant is released, Lock.settle).
func silentGrace(elapsed time.Duration) time.Duration {
	return max(5*time.Millisecond, 3*elapsed)
}

// timers recycles gather's timers: most rounds end by a reply, not by the
// deadline, and a timer that never fired can be reset and used again.
var timers sync.Pool

func getTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// putTimer stops t and keeps it only when it had not fired: then nothing was
// or will be sent on t.C, so a later user cannot receive a stale tick even
// under the pre-Go 1.23 timer semantics (GODEBUG=asynctimerchan=1).
func putTimer(t *time.Timer) {
	if t.Stop() {
		timers.Put(t)
	}
}

// never is a gather stop function that waits for every node.
func never([]reply) bool { return false }

func replyOf(rs []reply, idx int) (reply, bool) {
	for _, r := range rs {
		if r.node == idx {
			return r, true
		}
	}
	return reply{}, false
}

// tally counts the replies of one round.
type tally struct {
	ok, no, failed, permanent int
	errs                      []error
}

// ctxErrIf is ctx.Err() when interrupted says the ctx ended a round's wait.
func ctxErrIf(ctx context.Context, interrupted bool) error {
	if interrupted {
		return ctx.Err()
	}
	return nil
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// drift is the Redlock spec's allowance for clock drift between processes:
// ttl*factor, plus 2ms for Redis's expiry precision (0-1ms) and rounding.
func drift(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + 2*time.Millisecond
}

// validUntil is the end of local validity of a lease of ttl requested at t1:
// t1 + ttl - drift. t1 must be read from the monotonic clock (time.Now)
// immediately before the first request is sent: every key the request sets
// expires no earlier than t1 + ttl on the server, so no other owner can be
// granted the name before the returned instant. This is the spec's
// TTL - (T2-T1) - drift in absolute form; acquire, extend and renew all use it,
// and the caller checks time.Now() against it as the last step, after every
// round trip, so a pause anywhere before the return is caught.
func validUntil(t1 time.Time, ttl time.Duration, factor float64) time.Time {
	// The server gets whole milliseconds (ttlMillis): count no more.
	ttl = max(ttl.Truncate(time.Millisecond), time.Millisecond)
	return t1.Add(ttl - drift(ttl, factor))
}

// WAIT counts the replicas that acknowledged the last write of the
// connection it is sent on. go-redis hands out pooled connections, and a
// pipeline's connection is not a single command's, so a WAIT sent on its
// own after a script may land on a connection that wrote nothing lately and
// answer "all replicas" at once while replication is stalled. A script and
// its WAIT therefore travel in one pipeline, which go-redis writes on one
// connection. (Not in MULTI, where WAIT does not block; not in the script,
// where Redis refuses WAIT.)

// ackPipeline returns a pipeline on one connection to the master that holds
// key: the client's own for a single-server client (a Sentinel failover
// client included), the key's shard's for a Cluster or Ring client, whose
// pipelines would send a keyless WAIT to an arbitrary shard.
func ackPipeline(ctx context.Context, cl Client, key string) (redis.Pipeliner, error) {
	switch c := cl.(type) {
	case *redis.ClusterClient:
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return m.Pipeline(), nil
	case *redis.Ring:
		m, err := c.GetShardClientForKey(key)
		if err != nil {
			return nil, err
		}
		return m.Pipeline(), nil
	}
	return cl.Pipeline(), nil
}

// allClusters reports that every client is a *redis.ClusterClient: the
// releases then publish with SPUBLISH (sharded pub/sub), which keeps each
// message on the shard of its channel's slot, and waiters SSUBSCRIBE.
func allClusters(clients []Client) bool {
	for _, cl := range clients {
		if _, ok := cl.(*redis.ClusterClient); !ok {
			return false
		}
	}
	return len(clients) > 0
}

// keyRouted reports a client whose pipelines spread over several servers by
// key, so that one WAIT per pipeline does not cover every script in it.
func keyRouted(cl Client) bool {
	switch cl.(type) {
	case *redis.ClusterClient, *redis.Ring:
		return true
	}
	return false
}

// ackTimeout is WAIT's timeout for this lock's writes (WithReplicaAcks).
func ackTimeout(l *Lock) time.Duration { return time.Duration(l.ackMillis) * time.Millisecond }

// scriptAcked runs script and then WAIT replicas timeout on the same
// connection. It returns the script's command, and an error when the
// script succeeded but WAIT failed or counted fewer than replicas
// acknowledgements (a *ReplicaAcksError). A NOSCRIPT is answered by EVAL and
// a WAIT of its own, on the connection that EVAL ran on.
func scriptAcked(ctx context.Context, cl Client, script *redis.Script, keys []string, replicas int, timeout time.Duration, args ...any) (*redis.Cmd, error) {
	run := func(eval func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd) (*redis.Cmd, *redis.Cmd) {
		pipe, err := ackPipeline(ctx, cl, keys[0])
		if err != nil {
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(err)
			return cmd, nil
		}
		cmd := eval(ctx, pipe, keys, args...)
		wait := waitCmd(ctx, pipe, replicas, timeout)
		_, _ = pipe.Exec(ctx) // errors are read per command
		return cmd, wait
	}
	cmd, wait := run(script.EvalSha)
	if isNoScript(cmd.Err()) {
		cmd, wait = run(script.Eval)
	}
	if cmd.Err() != nil {
		return cmd, nil // the script's own error speaks for the call
	}
	return cmd, ackError(wait, replicas, timeout)
}

// waitCmd queues WAIT on pipe. timeout is at least 1ms (validate): WAIT 0
// would block until the replicas answer, however long that takes.
func waitCmd(ctx context.Context, pipe redis.Pipeliner, replicas int, timeout time.Duration) *redis.Cmd {
	return pipe.Do(ctx, "wait", replicas, timeout.Milliseconds())
}

// ackError reads a WAIT's answer against the replicas asked for.
func ackError(wait *redis.Cmd, replicas int, timeout time.Duration) error {
	n, err := wait.Int64()
	switch {
	case err != nil:
		return fmt.Errorf("redlock: WAIT %d %v: %w", replicas, timeout, err)
	case n < int64(replicas):
		return &ReplicaAcksError{Acked: int(n), Wanted: replicas, Timeout: timeout}
	}
	return nil
}

// fanOut calls every node in nodes concurrently. go-redis applies ctx
// deadlines to sockets only when the client enables it, so the bound is the
// caller's: it stops reading the channel at its deadline (gather). The
// channel is buffered to len(nodes), so calls that finish late (a paused
// server resumes) never block. Callers pass a ctx detached from their
// caller's cancellation (context.WithoutCancel) for writes: a write that is
// cut half-way has an unknown outcome, which is worse than one that
// completes and is then cleaned up; the watchdog passes one that Close
// cancels.
//
// callLimit bounds the call itself in the goroutine, when longer than timeout:
// a renewal pipeline may take until its locks' validity. Such a call runs on
// the client itself; a call bounded by timeout runs on the client's clone
// whose socket timeouts are timeout (callClient): a release that a node did
// not answer in time is sent again by releaseNode rather than waited for,
// and the pool keeps its connections. A single node whose client bounds the call
// itself (see node.bounded) is called inline, when nothing can cancel ctx
// (a caller that gathers until its own ctx ends uses round): no goroutine,
// no timer.
func (p *pool) fanOut(ctx context.Context, nodes []*node, timeout, callLimit time.Duration, call func(context.Context, *node, Client) reply) (<-chan reply, error) {
	if withDeadline, ok := inline(ctx, nil, nodes, timeout); ok {
		ch := make(chan reply, 1)
		ch <- p.callInline(ctx, nodes[0], withDeadline, timeout, call)
		return ch, nil
	}
	return p.spawn(ctx, nodes, timeout, callLimit, call)
}

// spawn is fanOut's goroutine path: a goroutine per node.
func (p *pool) spawn(ctx context.Context, nodes []*node, timeout, callLimit time.Duration, call func(context.Context, *node, Client) reply) (<-chan reply, error) {
	ch := make(chan reply, len(nodes))
	if !p.life.goCount(len(nodes)) {
		return nil, ErrClosed
	}
	limit := max(timeout, callLimit)
	var bound time.Duration // see callClient
	if callLimit <= timeout {
		// A little past the round's deadline, so that its timer, not the
		// calls' own errors coming in one by one, says which nodes did not
		// answer in time (a round that stopped at the third of five would
		// name three).
		bound = timeout + timeout/4
		limit = bound
	}
	if len(nodes) == 1 {
		// Nothing to share: one closure, and no fan to allocate.
		n := nodes[0]
		go func() {
			defer p.life.wg.Done()
			cctx, cancel := context.WithTimeout(ctx, limit)
			n.begin()
			r := call(cctx, n, callClient(n, bound))
			n.end(r.err)
			cancel()
			r.err = n.outcome(r.err)
			r.node = n.idx
			ch <- r
		}()
		return ch, nil
	}
	// One bound for the whole round rather than one per node: every call
	// gets the same deadline, and a Redlock of N masters pays for one context
	// and one timer instead of N. The last call to finish releases it.
	f := &fan{life: p.life, nodes: nodes, call: call, ch: ch, timeout: bound}
	f.ctx, f.cancel = context.WithTimeout(ctx, limit)
	f.left.Store(int32(len(nodes)))
	// One func value shared by the goroutines, each of which takes the next
	// node: a closure per goroutine would be one allocation per node.
	run := f.run
	for range nodes {
		go run()
	}
	return ch, nil
}

// round is fanOut then gather, for the hot paths: a reply made inline goes
// straight into the result, with no channel to allocate for it.
func (p *pool) round(ctx context.Context, nodes []*node, timeout, callLimit time.Duration, call func(context.Context, *node, Client) reply,
	deadline time.Time, done <-chan struct{}, stop func([]reply) bool) (rs []reply, interrupted bool, err error) {
	if withDeadline, ok := inline(ctx, done, nodes, timeout); ok {
		return []reply{p.callInline(ctx, nodes[0], withDeadline, timeout, call)}, false, nil
	}
	ch, err := p.spawn(ctx, nodes, timeout, callLimit, call)
	if err != nil {
		return nil, false, err
	}
	rs, interrupted = gather(ch, nodes, deadline, done, stop)
	return rs, interrupted, nil
}

// callInline runs call on a node whose client bounds the call itself (by
// its socket timeouts, or by the ctx deadline set here when withDeadline).
func (p *pool) callInline(ctx context.Context, n *node, withDeadline bool, timeout time.Duration, call func(context.Context, *node, Client) reply) reply {
	start := time.Now()
	if withDeadline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	r := call(ctx, n, n.clientFor(timeout))
	r.err = n.outcome(r.err)
	if r.err != nil && time.Since(start) >= timeout && !isServerError(r.err) && !errors.Is(r.err, errNodeTimeout) {
		// The socket deadline fired: same error as the goroutine path.
		r.err = fmt.Errorf("%w (%w)", errNodeTimeout, r.err)
	}
	r.node = n.idx
	return r
}

// count tallies replies. A node found to be a second address of another
// node's server never counts as a yes: one server must not cast two votes.
func (p *pool) count(rs []reply) tally {
	var t tally
	for _, r := range rs {
		err := r.err
		if err == nil && p.nodes[r.node].isDup() {
			err = errDuplicate
		}
		switch {
		case err != nil:
			t.failed++
			if isPermanent(err) || (p.nodes[r.node].fixed && redis.IsReadOnlyError(err)) {
				t.permanent++
			}
			t.errs = append(t.errs, p.nodeErr(r.node, err))
		case r.ok:
			t.ok++
		default:
			t.no++
		}
	}
	return t
}

// shortOf is the one error of a round that reached too few nodes: what op
// reached, then, joined, every node's error and, when the caller's ctx
// ended the wait (ctxErr not nil), that. after is said behind the count
// ("; the lock frees itself when its lease ends").
func (p *pool) shortOf(op, name string, t tally, after string, ctxErr error) error {
	errs := make([]error, 0, len(t.errs)+2)
	errs = append(errs, fmt.Errorf("redlock: %s %q reached %d of %d nodes, need %d%s", op, name, t.ok, len(p.nodes), p.quorum, after))
	errs = append(errs, t.errs...)
	if ctxErr != nil {
		errs = append(errs, ctxErr)
	}
	return join(errs...)
}

// notOurs says on how many nodes a round found the key gone or another
// owner's.
func (p *pool) notOurs(t tally) error {
	if len(p.nodes) == 1 {
		return errors.New("the key is gone or another owner's")
	}
	return fmt.Errorf("the key is gone or another owner's on %d of %d nodes", t.no, len(p.nodes))
}

// settled reports that the outcome of a round is decided: a quorum said yes,
// or so many said no or failed that a quorum of yes is out of reach.
//
// A call not sent to a silent node (its reply is there at once) does not
// settle a round before the nodes that were sent one have answered: an
// attempt that fails withdraws its grants before it returns, and it has to
// know them first.
func (p *pool) settled(rs []reply) bool {
	t := p.count(rs)
	if t.ok >= p.quorum {
		return true
	}
	failed := t.failed
	if len(rs) < len(p.nodes) {
		for _, r := range rs {
			if r.unsent {
				failed--
			}
		}
	}
	return p.impossible(t.no + failed)
}

// impossible reports that a quorum of yes can no longer be reached from the
// nodes that said no (or failed) in this round.
func (p *pool) impossible(no int) bool { return no > len(p.nodes)-p.quorum }

func (p *pool) nodeErr(i int, err error) error {
	return &NodeError{Node: i, Addr: p.nodes[i].addr, Err: err}
}

// identify makes sure a Redlock node's server is known before its vote
// counts, reading its run_id on first contact when the warm-up could not.
func (ids *idents) identify(ctx context.Context, n *node) error {
	if len(ids.nodes) < 2 || !identifiable(n.client) {
		return nil
	}
	id, dup := n.identity()
	if dup >= 0 {
		return fmt.Errorf("%w (node %d)", errDuplicate, dup)
	}
	if id != "" {
		return nil
	}
	sid, err := fetchRunID(ctx, n.client)
	if err != nil {
		return err
	}
	n.setIdentity(sid)
	ids.mu.Lock()
	err = ids.checkDuplicate(n)
	ids.mu.Unlock()
	if n.isDup() {
		return err
	}
	return nil
}

// checkDuplicate compares n's identity with every other node's; of two
// nodes with one run_id, or a master and its replica (one replication ID),
// the replica, else the later in the client list, is marked a duplicate of
// the other: its votes never count. Call it under ids.mu, so two nodes identified at once see each
// other.
func (ids *idents) checkDuplicate(n *node) error {
	for _, o := range ids.nodes {
		if o == n {
			continue
		}
		same, second, why := sameDataset(n, o)
		if !same {
			continue
		}
		first := n
		if second == n {
			first = o
		}
		second.dup.Store(int32(first.idx))
		return fmt.Errorf("%w: clients %d (%s) and %d (%s) %s", errDuplicate, first.idx, first.addr, second.idx, second.addr, why)
	}
	return nil
}

// duplicates marks and reports nodes whose run_id another node has already.
func (ids *idents) duplicates() error {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	var errs []error
	for _, n := range ids.nodes {
		if n.isDup() {
			continue
		}
		if err := ids.checkDuplicate(n); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return join(append([]error{errors.New("redlock: Redlock needs independent masters")}, errs...)...)
	}
	return nil
}

// warmUp dials every node, loads the scripts and, for a Redlock, learns each
// server's run_id, waiting at most warmUpLimit or the node timeout, whichever
// is longer. Two nodes that turn out to be one server (127.0.0.1:P and
// localhost:P, a DNS alias) make it fail: a quorum that one process can
// satisfy is no quorum.
func (ids *idents) warmUp(life *lifecycle, timeout time.Duration) error {
	identify := len(ids.nodes) > 1
	limit := max(warmUpLimit, timeout)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	done := make(chan struct{}, len(ids.nodes))
	life.wg.Add(len(ids.nodes))
	for _, n := range ids.nodes {
		go func() {
			defer life.wg.Done()
			defer func() { done <- struct{}{} }()
			if n.warmUp(ctx, identify && identifiable(n.client)) {
				// Also when this answer comes after the constructor stopped
				// waiting: the node's votes stop counting from then on.
				ids.mu.Lock()
				_ = ids.checkDuplicate(n)
				ids.mu.Unlock()
			}
		}()
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	defer cancel()
	for range ids.nodes {
		select {
		case <-done:
		case <-t.C:
			return ids.duplicates()
		}
	}
	return ids.duplicates()
}

// extend sends l's extend calls to every node, moving its lease to ttl, and
// gathers the replies until the outcome is settled, deadline passes or ctx
// ends (interrupted).
func (p *pool) extend(ctx context.Context, l *Lock, ttl time.Duration, deadline time.Time) (rs []reply, interrupted bool, err error) {
	return p.round(detached(ctx), p.nodes, l.timeout, l.timeout, func(ctx context.Context, n *node, cl Client) reply {
		defer keepCompanions(ctx, cl, l, ttl)
		if l.replicas == 0 {
			v, err := runParts(ctx, cl, l, kinds[l.kind].extend, ttl, foldExtend)
			return reply{ok: v == replyOK, code: v, err: err}
		}
		s, keys, args := kinds[l.kind].extend(l, 0, ttl) // one part: LockAll refuses acks over shards
		cmd, ackErr := scriptAcked(ctx, cl, s, keys, int(l.replicas), ackTimeout(l), args...)
		v, err := cmd.Int64()
		if err == nil && v == replyOK && ackErr != nil {
			// Extended on the master only: a failed attempt, not a refusal.
			return reply{code: v, err: ackErr}
		}
		return reply{ok: v == replyOK, code: v, err: err}
	}, deadline, ctx.Done(), p.settled)
}

// released is the verdict of an Unlock's release round: nil once a quorum
// released, ErrNotHeld when too many nodes no longer had our key.
func (p *pool) released(l *Lock, rs []reply) error {
	t := p.count(rs)
	switch {
	case t.ok >= p.quorum:
		return nil
	case p.impossible(t.no):
		return notHeld("unlock", l.name, p.notOurs(t))
	}
	return p.shortOf("unlock", l.name, t, "; the lock frees itself when its lease ends", nil)
}

// releaseOn sends the release script for l to nodes and waits for their
// replies up to timeout, or until stop says enough. Callers use it for
// cleanup, so it runs detached from the caller's cancellation: a cancelled
// caller still releases. A node that did not answer by then (a paused
// server, a silent link: a call bounded by the node timeout drops its
// connection, and the command waiting in it with it) is released again in
// the background until it answers (releaseNode). After Close, when the core
// may start no goroutine, it releases node by node from the caller's
// goroutine: a grant that nobody will own must not hold the name for a
// whole lease.
func (p *pool) releaseOn(ctx context.Context, l *Lock, nodes []*node, timeout time.Duration, stop func([]reply) bool) []reply {
	if len(nodes) == 0 {
		return nil
	}
	argv := releaseArgv(l) // one command for every node: go-redis only reads it
	call := func(ctx context.Context, n *node, cl Client) reply {
		if !p.send(n) {
			return reply{err: n.timedOut(), unsent: true} // released in the background (releaseNode)
		}
		l.releaseSent(n.idx)
		return releaseCall(ctx, cl, l, argv)
	}
	rs, _, err := p.round(detached(ctx), nodes, timeout, timeout, call, time.Now().Add(timeout), nil, stop)
	if err == nil {
		if silent := p.unanswered(rs); len(silent) > 0 {
			p.releaseInBackground(ctx, silent, l) // (locks... escapes: not on the common path)
		}
		return rs
	}
	rs = make([]reply, 0, len(nodes))
	for _, n := range nodes {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		r := call(cctx, n, n.clientFor(timeout))
		cancel()
		r.node = n.idx
		rs = append(rs, r)
	}
	return rs
}

// unanswered returns the nodes whose reply in rs is an error that is not
// the server's: the call may or may not have run (the round's deadline
// gives every silent node such a reply). A node with no reply at all is
// one the round stopped waiting for once a quorum had decided: its call
// goes on, bounded by the lease, and a healthy Redlock's slowest master is
// not released twice.
func (p *pool) unanswered(rs []reply) []*node {
	var out []*node
	for _, r := range rs {
		if r.err != nil && !isServerError(r.err) {
			out = append(out, p.nodes[r.node])
		}
	}
	return out
}

// releaseInBackground releases locks, in order, on each of nodes from a
// goroutine of the core per node, waiting for none: their outcome is
// unknown (the nodes failed or did not answer), and they will not answer
// the release any sooner. A goroutine per node, so that a hung node does not
// keep the others' keys.
func (p *pool) releaseInBackground(ctx context.Context, nodes []*node, locks ...*Lock) {
	if len(nodes) == 0 || len(locks) == 0 || !p.life.goCount(len(nodes)) {
		return
	}
	for _, n := range nodes {
		go func() {
			defer p.life.wg.Done()
			for _, l := range locks {
				p.releaseNode(ctx, n, l, false)
			}
		}()
	}
}

// releaseLater is releaseNode from a goroutine of its own, for a call that
// found it has something to release: the call ends now, so that it is not
// counted on the wire (node.begin) while the release waits for the node.
func (p *pool) releaseLater(ctx context.Context, n *node, l *Lock, ran bool) {
	if !p.life.goCount(1) {
		// Close has ended its I/O: this goroutine, which Close waits for,
		// releases it itself.
		p.releaseNode(ctx, n, l, ran)
		return
	}
	go func() {
		defer p.life.wg.Done()
		p.releaseNode(ctx, n, l, ran)
	}()
}

// releaseNode releases l on node n from a goroutine the core already owns,
// until the node answers. ran says a call of l's is known to have run there
// (a grant whose reply came late): the first answer settles it. Otherwise
// its outcome is unknown: a paused server, or one behind a stalled link,
// runs the commands waiting in its sockets when it resumes, in no set order
// across connections, so a release sent meanwhile may run before the grant
// or renewal it is meant to undo; an answer "not ours" is then followed by
// one more release: by then the server has run every command that was
// waiting when it answered, and a grant among them is ours to delete. Each
// call is bounded by the node timeout, so a link that heals is used within
// that much (see clientFor). It gives up after releaseRetryFor (three
// leases, if longer); once Close has begun, when the lease it releases
// would have ended (it outlives Close by that much at most), or at once on
// a node that refuses connections (a server that is not running holds no
// command of ours in a socket), or when the client is closed.
func (p *pool) releaseNode(ctx context.Context, n *node, l *Lock, ran bool) {
	ctx = context.WithoutCancel(ctx)
	begun := time.Now()
	end := begun.Add(max(3*l.leaseTTL(), releaseRetryFor))
	leaseEnd := begun.Add(l.leaseTTL())
	cl := n.clientFor(l.timeout)
	answered := ran
	for time.Now().Before(end) {
		start := time.Now()
		if !n.admit() {
			// Other calls probe the node: ask again shortly, sending
			// nothing that would hold a connection in the meantime.
			if p.life.isClosing() {
				end = earliest(end, leaseEnd)
			}
			t := getTimer(probeEvery)
			<-t.C
			putTimer(t)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, l.timeout)
		n.begin()
		l.releaseSent(n.idx)
		r := releaseCall(cctx, cl, l, releaseArgv(l))
		n.end(r.err)
		n.note(r.err)
		cancel()
		switch {
		case r.err == nil && (r.ok || answered):
			return
		case r.err == nil:
			answered = true
			continue
		case isPermanent(r.err):
			return
		}
		closing := p.life.closing // the wait ends there, to take up the bound below
		if p.life.isClosing() {
			if isDialError(r.err) {
				return
			}
			end, closing = earliest(end, leaseEnd), nil
		}
		t := getTimer(l.timeout - time.Since(start))
		select {
		case <-t.C:
		case <-closing:
		}
		putTimer(t)
	}
}

// isDialError reports a failure to connect at all (refused, unreachable).
func isDialError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// remaining is Lock.TTL (engine).
func (p *pool) remaining(ctx context.Context, l *Lock) (time.Duration, error) {
	rs, interrupted, err := p.leases(ctx, l)
	if err != nil {
		return 0, err
	}
	t := p.count(rs)
	if t.ok >= p.quorum {
		var ttls []time.Duration
		for _, r := range rs {
			if r.err == nil && r.ok && !p.nodes[r.node].isDup() {
				d := time.Duration(r.val) * time.Millisecond
				if r.val < 0 {
					d = -1 // no expiry: only when someone changed the key by hand
				}
				ttls = append(ttls, d)
			}
		}
		forever := func(d time.Duration) time.Duration {
			if d < 0 {
				return math.MaxInt64
			}
			return d
		}
		// Longest first: the quorum-th is what a quorum still grants.
		slices.SortFunc(ttls, func(a, b time.Duration) int { return cmp.Compare(forever(b), forever(a)) })
		return ttls[p.quorum-1], nil
	}
	if p.impossible(t.no) {
		return 0, notHeld("TTL of", l.name, p.notOurs(t))
	}
	return 0, p.shortOf("TTL of", l.name, t, "", ctxErrIf(ctx, interrupted))
}

// leases reads l's lease on every node (the pttl scripts): each reply's val
// is a lease in ms (-1: no expiry), or replyNotOurs (gone) or replyOthers
// (another owner's, or a key of another type) with ok false.
func (p *pool) leases(ctx context.Context, l *Lock) (rs []reply, interrupted bool, err error) {
	ch, err := p.fanOut(ctx, p.nodes, l.timeout, l.timeout, func(ctx context.Context, n *node, cl Client) reply {
		v, err := runParts(ctx, cl, l, kinds[l.kind].pttl, 0, foldPTTL)
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			v, err = replyOthers, nil // a value of another type where the set of holds was
		}
		return reply{ok: err == nil && v != replyNotOurs && v != replyOthers, val: v, err: err}
	})
	if err != nil {
		return nil, false, err
	}
	rs, interrupted = gather(ch, p.nodes, time.Now().Add(l.timeout), ctx.Done(), never)
	return rs, interrupted, nil
}

// releaseCall runs the release script of l: release.lua by argv (from
// releaseArgv), or, for the kinds with no argv, their own script.
func releaseCall(ctx context.Context, cl Client, l *Lock, argv []any) reply {
	if retracts(l) {
		v, err := sharded(scriptRetract, l.sharded).Run(ctx, cl, l.keys[:1], l.owner).Int64()
		return releaseReply(l, v, err)
	}
	if argv == nil {
		v, err := runParts(ctx, cl, l, kinds[l.kind].release, 0, foldRelease)
		return releaseReply(l, v, err)
	}
	v, err := runEval(ctx, cl, sharded(scriptRelease, l.sharded), argv).Int64()
	return releaseReply(l, v, err)
}

// retracts reports that a release of l withdraws the grants of a failed
// attempt (retract.lua) rather than giving up a held lock: an exclusive
// lock on one name that was never held.
func retracts(l *Lock) bool {
	return l.kind == kindExclusive && parts(l) == 1 && l.is(stateFailed)
}

// releaseReply turns release.lua's reply into a node reply, logging a
// release whose wake-up message the server refused to publish: the release
// itself stands, and waiters fall back to their timers.
func releaseReply(l *Lock, v int64, err error) reply {
	if err == nil && v == replyUnpublished {
		l.logger.Warn("redlock: released, but the server refused to publish the release message; waiters wake by their timers", "name", l.name)
	}
	return reply{ok: err == nil && v != replyNotOurs, code: v, err: err}
}

// observeNodes reports the NodeErrors in errs (joined or not) to obs.
func observeNodes(obs Observer, name, op string, errs ...error) {
	if obs == nil {
		return
	}
	for _, err := range errs {
		eachNodeError(err, func(ne *NodeError) {
			if !errors.Is(ne.Err, errTaken) {
				obs.OnNodeError(NodeErrorEvent{Name: name, Op: op, Err: ne})
			}
		})
	}
}

// eachNodeError calls f for every NodeError in err's tree.
func eachNodeError(err error, f func(*NodeError)) {
	switch e := err.(type) {
	case nil:
	case *NodeError:
		f(e)
	case interface{ Unwrap() []error }:
		for _, err := range e.Unwrap() {
			eachNodeError(err, f)
		}
	case interface{ Unwrap() error }:
		eachNodeError(e.Unwrap(), f)
	}
}

// scriptPing answers 1 on a writable master only: Redis 7 refuses a script
// with a shebang and without the no-writes flag on a replica (READONLY)
// before running it. A script, since Client has no other way to send a
// command to a Cluster's or Ring's node that holds keys.
var scriptPing = redis.NewScript("#!lua\nreturn 1")

// diagnoseLimit bounds the one call per silent node that diagnose makes:
// long enough for go-redis's own dial retries (5, 100ms apart).
const diagnoseLimit = 2 * time.Second

// diagnose finds out, before a wait gives up on nodes that never answered
// in time, why they did not: a node timeout shorter than go-redis's dial
// retries hides a refused connection behind "no reply". It makes one call
// with a longer bound on each node whose cause is unknown, and returns errs
// with those nodes' timeouts naming what it heard.
func (p *pool) diagnose(errs []error) []error {
	var silent []*node
	for _, e := range errs {
		if ne, ok := e.(*NodeError); ok && errors.Is(ne.Err, errNodeTimeout) && p.nodes[ne.Node].lastErr.Load() == nil {
			silent = append(silent, p.nodes[ne.Node])
		}
	}
	if len(silent) == 0 {
		return errs
	}
	ch, err := p.fanOut(context.Background(), silent, diagnoseLimit, diagnoseLimit, func(ctx context.Context, n *node, cl Client) reply {
		return reply{err: scriptPing.Run(ctx, cl, nil).Err()} // noted by fanOut
	})
	if err != nil {
		return errs // Close: no goroutine may start
	}
	gather(ch, silent, time.Now().Add(diagnoseLimit), nil, never)
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
		if ne, ok := e.(*NodeError); ok && errors.Is(ne.Err, errNodeTimeout) {
			out[i] = p.nodeErr(ne.Node, p.nodes[ne.Node].timedOut())
		}
	}
	return out
}

// ping checks that a quorum of c's nodes answer and accept writes, within
// the node timeout; the error names every node that does not, with its
// cause.
func ping(ctx context.Context, c *core) error {
	if c == nil {
		return errNoCore
	}
	p, timeout := c.pool, c.cfg.timeout(c.cfg.ttl)
	call := func(ctx context.Context, n *node, cl Client) reply {
		if err := p.ids.identify(ctx, n); err != nil {
			return reply{err: err}
		}
		err := scriptPing.Run(ctx, cl, nil).Err()
		return reply{ok: err == nil, err: err}
	}
	rs, interrupted, err := p.round(detached(ctx), p.nodes, timeout, timeout, call, time.Now().Add(timeout), ctx.Done(), never)
	if err != nil {
		return err
	}
	t := p.count(rs)
	if t.ok >= p.quorum && !interrupted {
		return nil
	}
	return join(append(append([]error{fmt.Errorf("redlock: ping: %d of %d nodes answer as writable masters, need %d", t.ok, len(p.nodes), p.quorum)}, t.errs...), ctxErrIf(ctx, interrupted))...)
}

// The one error of a call. Every error the library returns prints on one
// line: the operation and the lock's name, then the causes, each said once.
// They are built with join, which keeps every part for errors.Is and
// errors.As. (The error types themselves are in errors.go.)

// joinedError is errors.Join printed on one line: the first part in full,
// then ": " (or "; " after a node's failure) and the others separated by "; ", each without the "redlock: "
// prefix, leaving out quiet parts and any part whose text an earlier one
// already says.
type joinedError struct{ errs []error }

// join joins the non-nil errs as errors.Join does; nil when there are none.
func join(errs ...error) error {
	n := 0
	for _, e := range errs {
		if e != nil {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	j := &joinedError{errs: make([]error, 0, n)}
	for _, e := range errs {
		if inner, ok := e.(*joinedError); ok {
			j.errs = append(j.errs, inner.errs...) // flat: one list of clauses
		} else if e != nil {
			j.errs = append(j.errs, e)
		}
	}
	return j
}

func (j *joinedError) Error() string {
	var b strings.Builder
	said := make([]string, 0, len(j.errs))
	nodeHead := false // the head is a node's failure, not an operation: its peers follow with "; "
	for i, e := range j.errs {
		s := clauseOf(e)
		if ne, ok := e.(*NodeError); ok {
			if s = j.nodesSaying(i, ne); s == "" {
				continue // said with an earlier node's
			}
		}
		if te, ok := e.(*TakenError); ok && !strings.Contains(b.String(), strconv.Quote(te.Name)) {
			s = te.Error() // one name of a LockAll: say which
		}
		switch e.(type) {
		case quietError:
		case *NodeError:
			if len(said) == 0 {
				s, nodeHead = "redlock: "+s, true // the head: its prefix, and the nodes grouped
			}
		default:
			if len(said) == 0 {
				s = e.Error() // the head, in full
			} else {
				s = strings.TrimPrefix(s, "redlock: ")
			}
		}
		if s == "" || saidAlready(said, s) {
			continue
		}
		switch len(said) {
		case 0:
		case 1:
			if nodeHead {
				b.WriteString("; ")
			} else {
				b.WriteString(": ")
			}
		default:
			b.WriteString("; ")
		}
		b.WriteString(s)
		said = append(said, s)
	}
	return b.String()
}

// Unwrap returns the parts, for errors.Is and errors.As.
func (j *joinedError) Unwrap() []error { return j.errs }

// nodesSaying is the clause of the NodeError at i together with every later
// node that failed the same way ("node 1 (a), node 2 (b): refused"), or ""
// when an earlier node's clause said it already.
func (j *joinedError) nodesSaying(i int, ne *NodeError) string {
	cause := ne.cause()
	for _, e := range j.errs[:i] {
		if o, ok := e.(*NodeError); ok && o.cause() == cause {
			return ""
		}
	}
	names := []string{ne.label()}
	for _, e := range j.errs[i+1:] {
		if o, ok := e.(*NodeError); ok && o.cause() == cause {
			names = append(names, o.label())
		}
	}
	return nodesClause(names, cause)
}

func saidAlready(said []string, s string) bool {
	for _, x := range said {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

// clauser is a part that says less inside a joined error than alone: a
// TakenError need not repeat the lock's name, a NodeError or LostError the
// prefixes of what it wraps.
type clauser interface{ clause() string }

func clauseOf(e error) string {
	if c, ok := e.(clauser); ok {
		return c.clause()
	}
	return e.Error()
}

// quietError is a part of a joined error that errors.Is and errors.As see
// but that is not printed: it restates what another part says (each node's
// "held by another owner" next to the TakenError that names the holder).
type quietError struct{ err error }

func (q quietError) Error() string  { return q.err.Error() }
func (q quietError) clause() string { return "" }
func (q quietError) Unwrap() error  { return q.err }

// opError is the head of a joined error: the operation and the lock's name
// ("redlock: lock \"jobs\" not obtained"), matching its sentinel.
type opError struct {
	msg      string
	sentinel error
}

func (e *opError) Error() string { return e.msg }
func (e *opError) Unwrap() error { return e.sentinel }

// notHeld is the error of op (unlock, extend, TTL) on the lock name that
// found it no longer ours, with its cause.
func notHeld(op, name string, cause error) error {
	return join(&opError{msg: fmt.Sprintf("redlock: %s %q: lock not held", op, name), sentinel: ErrNotHeld}, cause)
}

// notObtained is the head of a failed acquisition of name.
func notObtained(name string) error {
	return &opError{msg: fmt.Sprintf("redlock: lock %q not obtained", name), sentinel: ErrNotObtained}
}
