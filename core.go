package redlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	scriptAcquire = newScript("acquire.lua")
	scriptRelease = newScript("release.lua")
	scriptExtend  = newScript("extend.lua")
	scriptRaise   = newScript("raise.lua")
)

// Reasons a node did not grant; they travel inside a NodeError.
var (
	errTaken       = errors.New("held by another owner")
	errNodeTimeout = errors.New("no reply within the node timeout")
	errBadReply    = errors.New("unexpected script reply")
)

// node is one Redis deployment: the only one of a Locker, one of the N
// independent masters of a Redlock.
type node struct {
	idx    int
	addr   string // the client's String(), for error messages
	server string // network and address without the DB, to spot one server given twice
	client Client
	// deadlines: the client applies ctx deadlines to its sockets
	// (ContextTimeoutEnabled), so a call on it is bounded without a
	// goroutine of ours watching it.
	deadlines bool
}

// core is the engine shared by Locker (one node) and Redlock (N nodes): the
// fan-out with library-enforced timeouts, quorum counting, validity, the lock
// registry and the watchdog. A Locker is simply a core with a quorum of 1.
type core struct {
	nodes  []*node
	quorum int
	cfg    config
	wd     *watchdog
	hooks  hooks

	waits waiters        // pub/sub wake-ups for Lock (wait.go)
	wg    sync.WaitGroup // every goroutine of the core, including calls left behind on a paused node

	closing chan struct{} // closed when Close starts: waiters give up

	mu sync.Mutex
	// closeStarted: Close has begun; no new lock may be registered.
	closeStarted bool
	// ioStopped: Close has released what it could; no goroutine may start,
	// so wg.Add never races the final wg.Wait.
	ioStopped bool
	held      map[*Lock]struct{}
	// heldKeys counts held locks per lock key, so a waiter of this core does
	// not waste an attempt on a name its own process holds.
	heldKeys map[string]int
}

// hooks let tests put a pause at an exact point of the protocol.
type hooks struct {
	beforeFinalCheck func() // after the last reply (and token write-back), before now < Until
}

func newCore(clients []Client, opts []Option) (*core, error) {
	if len(clients) == 0 {
		return nil, errors.New("redlock: no clients")
	}
	cfg, err := defaultConfig().with(opts)
	if err != nil {
		return nil, err
	}
	c := &core{
		quorum:   len(clients)/2 + 1,
		cfg:      cfg,
		closing:  make(chan struct{}),
		held:     make(map[*Lock]struct{}),
		heldKeys: make(map[string]int),
	}
	c.waits = waiters{c: c, queues: make(map[string]*waitQueue)}
	for i, cl := range clients {
		if isNil(cl) {
			return nil, fmt.Errorf("redlock: client %d is nil", i)
		}
		n := &node{idx: i, client: cl, deadlines: honorsDeadlines(cl)}
		if s, ok := cl.(fmt.Stringer); ok {
			n.addr = s.String()
		}
		n.server = n.addr
		if o, ok := cl.(interface{ Options() *redis.Options }); ok {
			// Two DB numbers of one server are one failure domain, not two
			// masters: compare without the DB.
			n.server = o.Options().Network + "/" + o.Options().Addr
		}
		for _, prev := range c.nodes {
			if samePointer(prev.client, cl) || (n.server != "" && prev.server == n.server) {
				return nil, fmt.Errorf("redlock: clients %d and %d are the same node (%s); Redlock needs independent masters", prev.idx, i, n.addr)
			}
		}
		c.nodes = append(c.nodes, n)
	}
	c.wd = newWatchdog(c)
	return c, nil
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

func (c *core) nodeErr(i int, err error) error {
	return &NodeError{Node: i, Addr: c.nodes[i].addr, Err: err}
}

// reply is one node's answer to one script call.
type reply struct {
	node int
	ok   bool  // the script said yes (granted, released, extended, raised)
	val  int64 // token or PTTL, by script
	// codes holds per-lock results of a pipelined batch (see batch).
	codes []int8
	err   error
}

// goCount registers n goroutines with the core, or reports false once Close
// has finished releasing, so that wg.Add never races wg.Wait.
func (c *core) goCount(n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ioStopped {
		return false
	}
	c.wg.Add(n)
	return true
}

func (c *core) isStopped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ioStopped
}

// fanOut calls every node in nodes concurrently. go-redis applies ctx
// deadlines to sockets only when the client enables it, so the bound is the
// caller's: it stops reading the channel at its deadline (timeout). The
// channel is buffered to len(nodes), so calls that finish late (a paused
// server resumes) never block, and each call runs on a context detached from
// the caller's cancellation: a write that is cut half-way has an unknown
// outcome, which is worse than one that completes and is then cleaned up.
//
// callLimit bounds the call itself in the goroutine, when longer than timeout:
// a release that reaches a resumed server late is still worth making, and
// go-redis's EVALSHA-to-EVAL fallback after NOSCRIPT is a second command that
// a spent context would stop. A client that cuts calls at the deadline itself
// is called inline, bounded by timeout.
func (c *core) fanOut(ctx context.Context, nodes []*node, timeout, callLimit time.Duration, call func(context.Context, *node) reply) (<-chan reply, error) {
	ch := make(chan reply, len(nodes))
	base := context.WithoutCancel(ctx)
	if len(nodes) == 1 && nodes[0].deadlines {
		// The client itself cuts the call at the deadline: run it here and
		// save two goroutine switches on every call of a single node.
		if c.isStopped() {
			return nil, ErrClosed
		}
		n := nodes[0]
		cctx, cancel := context.WithTimeout(base, timeout)
		r := call(cctx, n)
		if dl, _ := cctx.Deadline(); r.err != nil && !time.Now().Before(dl) {
			// The socket deadline can fire before the context's own timer,
			// so compare with the clock. Same error as the goroutine path.
			r.err = fmt.Errorf("%w (%v)", errNodeTimeout, r.err)
		}
		cancel()
		r.node = n.idx
		ch <- r
		return ch, nil
	}
	if !c.goCount(len(nodes)) {
		return nil, ErrClosed
	}
	for _, n := range nodes {
		go func() {
			defer c.wg.Done()
			cctx, cancel := context.WithTimeout(base, max(timeout, callLimit))
			r := call(cctx, n)
			cancel()
			r.node = n.idx
			ch <- r
		}()
	}
	return ch, nil
}

// gather reads replies from ch until stop says enough, every node answered,
// the deadline passed, or done closed. Nodes that did not answer get an
// errNodeTimeout reply. It reports whether done ended the wait.
func gather(ch <-chan reply, nodes []*node, deadline time.Time, done <-chan struct{}, stop func([]reply) bool) (got []reply, interrupted bool) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	answered := make(map[int]bool, len(nodes))
	for len(got) < len(nodes) && !stop(got) {
		select {
		case r := <-ch:
			answered[r.node] = true
			got = append(got, r)
		case <-t.C:
			for _, n := range nodes {
				if !answered[n.idx] {
					got = append(got, reply{node: n.idx, err: errNodeTimeout})
				}
			}
			return got, false
		case <-done:
			return got, true
		}
	}
	return got, false
}

// tally counts the replies of one round.
type tally struct {
	ok, no, failed, permanent int
	errs                      []error
}

func (c *core) count(rs []reply) tally {
	var t tally
	for _, r := range rs {
		switch {
		case r.err != nil:
			t.failed++
			if isPermanent(r.err) {
				t.permanent++
			}
			t.errs = append(t.errs, c.nodeErr(r.node, r.err))
		case r.ok:
			t.ok++
		default:
			t.no++
		}
	}
	return t
}

// impossible reports that a quorum of yes can no longer be reached from the
// nodes that said no (or failed) in this round.
func (c *core) impossible(no int) bool { return no > len(c.nodes)-c.quorum }

// isPermanent tells a configuration or programming error (wrong password,
// wrong key type, script error) from a failure that a retry may get past
// (timeouts, dropped connections, a loading or failing-over server).
func isPermanent(err error) bool {
	if errors.Is(err, redis.ErrClosed) {
		return true // the caller closed the client: no retry can succeed
	}
	if errors.Is(err, errNodeTimeout) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "MOVED", "ASK"} {
			if strings.HasPrefix(re.Error(), p) {
				return false
			}
		}
		return true
	}
	return false
}

func ttlMillis(ttl time.Duration) int64 { return max(ttl.Milliseconds(), 1) }

// acquire makes one attempt on all nodes. It returns the held lock, or an
// error matching ErrNotObtained together with how long the current holder's
// lease has left (negative when unknown) and whether retrying is pointless.
func (c *core) acquire(ctx context.Context, name string, cfg *config) (*Lock, time.Duration, bool, error) {
	l := c.newLock(name, cfg)
	timeout := cfg.timeout(cfg.ttl)
	fence, floor := "0", ""
	if cfg.fencing {
		fence = "1"
	}
	if cfg.fencing && len(c.nodes) > 1 {
		// One floor for all masters, so that they mint the same token and the
		// write-back round of settleToken is needed only when a counter is
		// already past it. A single node uses its own TIME.
		floor = strconv.FormatInt(time.Now().UnixMicro(), 10)
	}
	// Redlock step 1: T1 before the first request; every key set by this
	// attempt expires no earlier than T1+TTL on its server.
	t1 := time.Now()
	until := validUntil(t1, cfg.ttl, cfg.driftFactor)
	ch, err := c.fanOut(ctx, c.nodes, timeout, timeout, func(ctx context.Context, n *node) reply {
		res, err := scriptAcquire.Run(ctx, n.client, l.keys, l.owner, ttlMillis(cfg.ttl), fence, floor).Int64Slice()
		var r reply
		o := failed
		switch {
		case err != nil:
			r = reply{err: err}
		case len(res) != 2:
			r = reply{err: fmt.Errorf("%w: %v", errBadReply, res)}
		case res[0] == 1:
			r, o = reply{ok: true, val: res[1]}, granted
		default:
			r, o = reply{val: res[1]}, taken
		}
		if l.settle(n.idx, o) {
			// The reply arrived after the attempt was given up or the lock
			// released or lost: nobody else will delete this key, so we do.
			c.releaseNode(ctx, n, l)
		}
		return r
	})
	if err != nil {
		return nil, -1, true, errors.Join(ErrNotObtained, err)
	}
	// Step 2: wait for a quorum (returning without stragglers), for its
	// impossibility, or for the per-node timeout, whichever is first.
	rs, interrupted := gather(ch, c.nodes, earliest(t1.Add(timeout), until), ctx.Done(), func(rs []reply) bool {
		t := c.count(rs)
		return t.ok >= c.quorum || c.impossible(t.no+t.failed)
	})
	t := c.count(rs)
	hint := time.Duration(-1)
	for _, r := range rs {
		if r.err == nil && !r.ok {
			t.errs = append(t.errs, c.nodeErr(r.node, errTaken))
			if d := time.Duration(r.val) * time.Millisecond; r.val >= 0 && (hint < 0 || d < hint) {
				hint = d
			}
		}
	}
	var token int64
	if t.ok >= c.quorum && !interrupted {
		var err error
		token, err = c.settleToken(ctx, l, rs, timeout, until)
		if err != nil {
			t.errs = append(t.errs, err)
		} else {
			if c.hooks.beforeFinalCheck != nil {
				c.hooks.beforeFinalCheck()
			}
			// Step 3, last: the lock counts only if it is still valid now,
			// after every round trip, so any pause before this line is caught.
			if time.Now().Before(until) {
				if err := c.activate(l, token, until); err != nil {
					return nil, -1, true, errors.Join(ErrNotObtained, err)
				}
				return l, -1, false, nil
			}
			t.errs = append(t.errs, fmt.Errorf("redlock: validity of %v used up before the grant completed", cfg.ttl))
		}
	}
	// Step 5: not obtained. Release on every node that may hold our key:
	// those that granted, released and waited for; those that failed or have
	// not answered yet, released in the background, since they will not
	// answer the release sooner than the attempt (a grant arriving after the
	// release is released by its own call, see Lock.settle). Nodes that
	// answered "taken" hold nothing of ours.
	l.mu.Lock()
	l.transition(stateFailed, "")
	grantedOn, unknownOn := l.settled(granted), l.settled(failed, pending)
	l.mu.Unlock()
	c.releaseOn(ctx, l, grantedOn, timeout, never)
	c.releaseInBackground(ctx, l, unknownOn)
	errs := append([]error{ErrNotObtained}, t.errs...)
	if interrupted {
		errs = append(errs, ctx.Err())
	}
	permanent := t.permanent > len(c.nodes)-c.quorum
	return nil, hint, permanent, errors.Join(errs...)
}

// never is a gather stop function that waits for every node.
func never([]reply) bool { return false }

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// settleToken picks the fencing token of a granted attempt: the largest
// minted by the granting nodes. When they disagree (N > 1), it first raises
// the counters of the other nodes to it and waits until a majority holds a
// counter >= token, so any later quorum, which intersects that majority,
// mints a strictly larger token.
func (c *core) settleToken(ctx context.Context, l *Lock, rs []reply, timeout time.Duration, until time.Time) (int64, error) {
	var token int64
	for _, r := range rs {
		if r.err == nil && r.ok {
			token = max(token, r.val)
		}
	}
	if !l.fencing {
		return 0, nil
	}
	var behind []*node
	atToken := 0
	for _, n := range c.nodes {
		if r, ok := replyOf(rs, n.idx); ok && r.err == nil && r.ok && r.val == token {
			atToken++
		} else {
			behind = append(behind, n)
		}
	}
	if atToken >= c.quorum || len(behind) == 0 {
		return token, nil
	}
	arg := fmt.Sprintf("%d", token)
	ch, err := c.fanOut(ctx, behind, timeout, timeout, func(ctx context.Context, n *node) reply {
		v, err := scriptRaise.Run(ctx, n.client, l.keys[1:2], arg).Int64()
		return reply{ok: err == nil && v >= token, val: v, err: err}
	})
	if err != nil {
		return 0, err
	}
	need := c.quorum - atToken
	got, _ := gather(ch, behind, earliest(time.Now().Add(timeout), until), ctx.Done(), func(rs []reply) bool {
		return c.count(rs).ok >= need
	})
	if t := c.count(got); t.ok < need {
		return 0, errors.Join(append([]error{fmt.Errorf("redlock: fencing token %d reached %d of %d nodes, need a majority", token, atToken+t.ok, len(c.nodes))}, t.errs...)...)
	}
	return token, nil
}

func replyOf(rs []reply, idx int) (reply, bool) {
	for _, r := range rs {
		if r.node == idx {
			return r, true
		}
	}
	return reply{}, false
}

// releaseOn sends the release script for l to nodes and waits for their
// replies up to timeout. Callers use it for cleanup, so it runs detached from
// the caller's cancellation: a cancelled caller still releases.
func (c *core) releaseOn(ctx context.Context, l *Lock, nodes []*node, timeout time.Duration, stop func([]reply) bool) []reply {
	if len(nodes) == 0 {
		return nil
	}
	ch, err := c.fanOut(ctx, nodes, timeout, l.leaseTTL(), func(ctx context.Context, n *node) reply {
		v, err := scriptRelease.Run(ctx, n.client, l.keys[:1], l.owner, l.channel).Int64()
		return reply{ok: v == 1, err: err}
	})
	if err != nil {
		return nil
	}
	rs, _ := gather(ch, nodes, time.Now().Add(timeout), nil, stop)
	return rs
}

// releaseInBackground sends l's release to nodes from a goroutine of the
// core, waiting for none: they failed or did not answer the attempt, so their
// outcome is unknown, and they will not answer the release any sooner.
func (c *core) releaseInBackground(ctx context.Context, l *Lock, nodes []*node) {
	if len(nodes) == 0 || !c.goCount(1) {
		return
	}
	go func() {
		defer c.wg.Done()
		for _, n := range nodes {
			c.releaseNode(ctx, n, l)
		}
	}()
}

// releaseNode releases l on one node from a goroutine the core already owns.
func (c *core) releaseNode(ctx context.Context, n *node, l *Lock) {
	// Until the lease would end anyway: a late release still frees the name.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.leaseTTL())
	defer cancel()
	_ = scriptRelease.Run(ctx, n.client, l.keys[:1], l.owner, l.channel).Err() // the key expires by itself if this fails
}

// activate turns a granted attempt into a held lock and registers it with the
// core and, with auto-renew, the watchdog.
func (c *core) activate(l *Lock, token int64, until time.Time) error {
	c.mu.Lock()
	if c.closeStarted {
		c.mu.Unlock()
		l.finish(stateFailed, "")
		c.releaseOn(context.Background(), l, c.nodes, l.timeout, never)
		return ErrClosed
	}
	c.held[l] = struct{}{}
	c.heldKeys[l.keys[0]]++
	c.mu.Unlock()
	l.hold(token, until)
	if l.autoRenew {
		c.wd.schedule(l, l.renewAt(time.Now()))
	}
	return nil
}

// forget drops a lock that is no longer held from the registry and the
// watchdog. The lock's state changed first, so the watchdog cannot re-add it.
func (c *core) forget(l *Lock) {
	c.mu.Lock()
	_, was := c.held[l]
	if was {
		delete(c.held, l)
		if c.heldKeys[l.keys[0]]--; c.heldKeys[l.keys[0]] <= 0 {
			delete(c.heldKeys, l.keys[0])
		}
	}
	c.mu.Unlock()
	c.wd.remove(l)
	if was {
		c.waits.idle(l.channel)
	}
}

// lock is Lock (wait=true) and TryLock (wait=false).
func (c *core) lock(ctx context.Context, name string, opts []Option, wait bool) (*Lock, error) {
	if name == "" {
		return nil, errors.New("redlock: empty lock name")
	}
	cfg, err := c.cfg.with(opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(ErrNotObtained, err)
	}
	if c.isClosing() {
		return nil, errors.Join(ErrNotObtained, ErrClosed)
	}
	if !wait {
		l, _, _, err := c.acquire(ctx, name, &cfg)
		return l, err
	}
	key := lockKey(cfg.prefix, name)
	channel := releaseChannel(key)
	// FIFO within this core: no attempt while others of ours wait or hold the
	// name; queue behind them instead (see wait.go). An uncontended Lock
	// never touches pub/sub: it subscribes only after a failed attempt.
	try := !c.waits.busy(channel) && !c.holds(key)
	var w *waiter
	acquired := false
	defer func() {
		if w != nil {
			c.waits.leave(channel, w, acquired)
		}
	}()
	lastErr := ErrNotObtained
	hint := time.Duration(-1)
	for attempt := 0; ; attempt++ {
		if try {
			l, h, permanent, err := c.acquire(ctx, name, &cfg)
			if err == nil {
				acquired = true
				return l, nil
			}
			if permanent || ctx.Err() != nil {
				if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
					err = errors.Join(err, cerr)
				}
				return nil, err
			}
			lastErr, hint = err, h
		}
		try = true
		if w == nil {
			var sent <-chan struct{}
			w, sent = c.waits.join(channel)
			subscribed(ctx, sent, c.quorum, cfg.timeout(cfg.ttl))
		}
		d := cfg.retry(attempt)
		switch {
		case hint < 0:
		case attempt > 0 && c.waits.trusted():
			// Release messages arrive: sleep until the holder's lease would
			// run out (a crashed holder publishes nothing), not in polls.
			d = hint + time.Millisecond
		case hint+time.Millisecond < d:
			// Polling: never sleep past the end of the holder's lease. The
			// first wait polls too: a release may have come between the
			// failed attempt and the SUBSCRIBE.
			d = hint + time.Millisecond
		}
		if err := c.await(ctx, channel, w, d); err != nil {
			return nil, errors.Join(lastErr, err)
		}
	}
}

func lockKey(prefix, name string) string { return "{" + prefix + name + "}" }

// holds reports whether a lock of this core currently holds key.
func (c *core) holds(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.heldKeys[key] > 0
}

func (c *core) isClosing() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// do is Do: hold the lock while fn runs.
func (c *core) do(ctx context.Context, name string, fn func(context.Context) error, opts []Option) (err error) {
	if fn == nil {
		return errors.New("redlock: nil function")
	}
	l, err := c.lock(ctx, name, opts, true)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(context.WithValue(ctx, lockKeyCtx{}, l))
	defer cancel(nil)
	l.onLoss(func() { cancel(ErrLost) })
	defer func() {
		p := recover()
		uerr := l.Unlock(context.WithoutCancel(ctx))
		if p != nil {
			panic(p) // released first, then the panic goes on
		}
		if errors.Is(l.Err(), ErrLost) || errors.Is(uerr, ErrLost) {
			err = errors.Join(err, ErrLost)
		} else if uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	return fn(fctx)
}

type lockKeyCtx struct{}

// FromContext returns the lock that Do holds while running its function,
// from the context Do passes it, so the function can send the lock's fencing
// token with its writes. It reports false for any other context.
func FromContext(ctx context.Context) (*Lock, bool) {
	l, ok := ctx.Value(lockKeyCtx{}).(*Lock)
	return l, ok
}

// close stops the watchdog, releases every held lock (best effort, one
// pipelined round per node, bounded by the node timeout) and waits for every
// goroutine the core started.
func (c *core) close() error {
	c.mu.Lock()
	if c.closeStarted {
		c.mu.Unlock()
		return nil
	}
	c.closeStarted = true
	close(c.closing)
	held := make([]*Lock, 0, len(c.held))
	for l := range c.held {
		held = append(held, l)
	}
	c.mu.Unlock()

	c.wd.stop()
	var live []*Lock
	for _, l := range held {
		if l.finish(stateReleased, "") {
			live = append(live, l)
		}
	}
	c.batch(context.Background(), live, nil, time.Now().Add(c.cfg.timeout(c.cfg.ttl)), nil)
	c.waits.close()

	c.mu.Lock()
	c.ioStopped = true
	c.mu.Unlock()
	c.wg.Wait()
	return nil
}
