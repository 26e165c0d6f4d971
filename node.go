package redlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
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
	// dup is the index of the node this one duplicates, or -1. Atomic: every
	// tally reads it, on the hot path.
	dup atomic.Int32
	// evict is the server's maxmemory-policy, read by the warm-up (evict.go).
	evict evictionProbe
}

func newNode(idx int, cl Client) *node {
	n := &node{idx: idx, client: cl, deadlines: honorsDeadlines(cl)}
	n.dup.Store(-1)
	if s, ok := cl.(fmt.Stringer); ok {
		n.addr = s.String()
	}
	_, n.ring = cl.(*redis.Ring)
	return n
}

// bounded returns whether a call on the node is bounded by timeout without
// a goroutine of ours watching it, and whether the ctx must then carry that
// deadline: with ContextTimeoutEnabled the client turns the ctx deadline
// into socket deadlines; a *redis.Client whose dial, read and write timeouts
// are all positive and no longer than timeout bounds every step itself,
// except the wait for a free connection of a full pool, which lasts up to
// PoolTimeout (by default ReadTimeout + 1s), and a dial, which go-redis
// retries DialerRetries times (5 by default, 100ms apart) on a refused
// connection: go-redis ends both at the ctx deadline whatever
// ContextTimeoutEnabled says, so the ctx carries one when PoolTimeout is
// longer or a dial may be retried. (redis.Client.WithTimeout would give a bounded
// client for any timeout, but its clone keeps only the hooks added before
// it: tracing or metrics added later would miss every lock command.)
func (n *node) bounded(timeout time.Duration) (withDeadline, ok bool) {
	if n.deadlines {
		return true, true
	}
	if o, isClient := n.client.(interface{ Options() *redis.Options }); isClient {
		opt := o.Options()
		within := func(d time.Duration) bool { return d > 0 && d <= timeout }
		return !within(opt.PoolTimeout) || opt.DialerRetries > 1, within(opt.DialTimeout) && within(opt.ReadTimeout) && within(opt.WriteTimeout)
	}
	return false, false
}

// cleanupClient is the node's client for a cleanup call bounded by timeout:
// a call whose ctx deadline go-redis ignores (no ContextTimeoutEnabled)
// would wait for the client's read timeout (3s by default) on a link that
// swallows it, so a plain *redis.Client is cloned with socket timeouts of
// timeout (WithTimeout: the clone shares the pool, and is made per cleanup,
// so it has every hook added until then). Other clients bound the call by
// the ctx deadline when they honour it, else by their own timeouts.
func (n *node) cleanupClient(timeout time.Duration) Client {
	if rc, ok := n.client.(*redis.Client); ok && !n.deadlines {
		return rc.WithTimeout(timeout)
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
			n.setRunID(id)
			identified = true
		}
	}
	for _, s := range allScripts {
		if err := s.Load(ctx, n.client).Err(); err != nil {
			break
		}
	}
	n.evict.probe(ctx, n.client)
	return identified
}

// fetchRunID reads INFO server's run_id through a one-command pipeline (the
// Client interface asks for no more than that).
func fetchRunID(ctx context.Context, cl Client) (string, error) {
	pipe := cl.Pipeline()
	cmd := pipe.Info(ctx, "server")
	if _, err := pipe.Exec(ctx); err != nil {
		if isServerError(err) {
			// The server will not say who it is (an ACL user without
			// +info, a server that does not implement INFO server): it
			// cannot be told apart from the others, so it is taken as
			// distinct rather than never allowed to vote.
			return unidentified, nil
		}
		return "", err
	}
	for line := range strings.Lines(cmd.Val()) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok && v != "" {
			return v, nil
		}
	}
	return "", fmt.Errorf("%w: INFO server without run_id", errBadReply)
}

// unidentified stands for the run_id of a server that refuses INFO.
const unidentified = "?"

func (n *node) setRunID(id string) {
	n.idMu.Lock()
	n.runID = id
	n.idMu.Unlock()
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
// a release that reaches a resumed server late is still worth making, and
// go-redis's EVALSHA-to-EVAL fallback after NOSCRIPT is a second command that
// a spent context would stop. A single node whose client bounds the call
// itself (see node.bounded) is called inline, when nothing else can cancel
// ctx: no goroutine, no timer.
func (c *core) fanOut(ctx context.Context, nodes []*node, timeout, callLimit time.Duration, call func(context.Context, *node) reply) (<-chan reply, error) {
	ch := make(chan reply, len(nodes))
	if withDeadline, ok := inline(ctx, nodes, timeout); ok {
		ch <- c.callInline(ctx, nodes[0], withDeadline, timeout, call)
		return ch, nil
	}
	if !c.goCount(len(nodes)) {
		return nil, ErrClosed
	}
	limit := max(timeout, callLimit)
	if len(nodes) == 1 {
		// Nothing to share: one closure, and no fan to allocate.
		n := nodes[0]
		go func() {
			defer c.wg.Done()
			cctx, cancel := context.WithTimeout(ctx, limit)
			r := call(cctx, n)
			cancel()
			r.node = n.idx
			ch <- r
		}()
		return ch, nil
	}
	// One bound for the whole round rather than one per node: every call
	// gets the same deadline, and a Redlock of N masters pays for one context
	// and one timer instead of N. The last call to finish releases it.
	f := &fan{c: c, nodes: nodes, call: call, ch: ch}
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

// inline reports whether fanOut calls nodes from the caller's goroutine, and
// whether with a ctx deadline (see callInline). Only for a ctx nothing
// cancels: go-redis turns a ctx deadline into a socket deadline but does not
// interrupt a read on cancellation, so a cancellable caller (the watchdog,
// which Close stops) needs the goroutine path for gather to stop waiting at
// once.
func inline(ctx context.Context, nodes []*node, timeout time.Duration) (withDeadline, ok bool) {
	if len(nodes) != 1 || ctx.Done() != nil {
		return false, false
	}
	return nodes[0].bounded(timeout)
}

// round is fanOut then gather, for the hot paths: a reply made inline goes
// straight into the result, with no channel to allocate for it.
func (c *core) round(ctx context.Context, nodes []*node, timeout, callLimit time.Duration, call func(context.Context, *node) reply,
	deadline time.Time, done <-chan struct{}, stop func([]reply) bool) (rs []reply, interrupted bool, err error) {
	if withDeadline, ok := inline(ctx, nodes, timeout); ok {
		return []reply{c.callInline(ctx, nodes[0], withDeadline, timeout, call)}, false, nil
	}
	ch, err := c.fanOut(ctx, nodes, timeout, callLimit, call)
	if err != nil {
		return nil, false, err
	}
	rs, interrupted = gather(ch, nodes, deadline, done, stop)
	return rs, interrupted, nil
}

// fan is one round of fanOut's goroutines: one per node, all sharing ctx.
type fan struct {
	c      *core
	ctx    context.Context
	cancel context.CancelFunc
	nodes  []*node
	call   func(context.Context, *node) reply
	ch     chan reply
	next   atomic.Int32 // index in nodes of the next goroutine's node
	left   atomic.Int32 // calls not finished yet
}

func (f *fan) run() {
	defer f.c.wg.Done()
	n := f.nodes[f.next.Add(1)-1]
	r := f.call(f.ctx, n)
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

// callInline runs call on a node whose client bounds the call itself (by
// its socket timeouts, or by the ctx deadline set here when withDeadline).
func (c *core) callInline(ctx context.Context, n *node, withDeadline bool, timeout time.Duration, call func(context.Context, *node) reply) reply {
	start := time.Now()
	if withDeadline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	r := call(ctx, n)
	if r.err != nil && time.Since(start) >= timeout && !isServerError(r.err) {
		// The socket deadline fired: same error as the goroutine path.
		r.err = fmt.Errorf("%w (%w)", errNodeTimeout, r.err)
	}
	r.node = n.idx
	return r
}

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
		return false
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

// isNoScript reports that a script is not in the server's cache, however a
// hook wrapped the error.
func isNoScript(err error) bool {
	return errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")
}
