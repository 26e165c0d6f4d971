package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// errNoCore is what a nil or zero Locker or Redlock answers.
var errNoCore = errors.New("redlock: Locker or Redlock not made by NewLocker or NewRedlock")

// errTokenSpace: a name's fencing counter is where a Lua double can no longer
// count up by one, so the next token would repeat the last.
var errTokenSpace = errors.New("fencing counter exhausted: tokens would stop increasing at 2^53-1")

// acquire makes one attempt on all nodes. It returns the held lock, or an
// error matching ErrNotObtained together with how long the current holder's
// lease has left (negative when unknown) and whether retrying is pointless.
// l is the attempt's lock, of any kind; ww is a waiting writer's place in
// the name's queue, nil for a call that is no waiting writer.
func (c *core) acquire(ctx context.Context, l *Lock, cfg *config, ww *writerWait) (*Lock, time.Duration, bool, error) {
	if c.isClosing() {
		return nil, -1, true, errors.Join(ErrNotObtained, ErrClosed)
	}
	name := l.name
	wait := ""
	if ww != nil {
		// The first attempt's owner value names the caller among the
		// waiting writers for the rest of its Lock call.
		if ww.id == "" {
			ww.id = l.owner
		}
		wait = ww.id
	}
	timeout := cfg.timeout(cfg.ttl)
	script, keys, args := c.acquireArgs(l, cfg, wait)
	// Redlock step 1: T1 before the first request; every key set by this
	// attempt expires no earlier than T1+TTL on its server.
	t1 := time.Now()
	until := validUntil(t1, cfg.ttl, cfg.driftFactor)
	call := func(ctx context.Context, n *node) reply {
		r, o := c.acquireOn(ctx, n, l, cfg, script, keys, args)
		if l.settle(n.idx, o) {
			// The reply arrived after the attempt was given up or the lock
			// released or lost: nobody else will delete this key, so we do.
			// A grant is known to have run: one release. An error leaves
			// the outcome unknown: released until the node answers.
			if o == granted {
				c.releaseOnce(ctx, n, l)
			} else {
				c.releaseNode(ctx, n, l)
			}
		}
		return r
	}
	// Step 2: wait for a quorum (returning without stragglers), for its
	// impossibility, or for the per-node timeout, whichever is first.
	rs, interrupted, err := c.round(detached(ctx), c.nodes, timeout, timeout, call, earliest(t1.Add(timeout), until), ctx.Done(), c.settled)
	if err != nil {
		return nil, -1, true, errors.Join(ErrNotObtained, err)
	}
	t := c.count(rs)
	observeNodes(cfg.observer, name, opAcquire, t.errs...)
	hint := c.refusals(&t, l, rs)
	if t.ok >= c.quorum && !interrupted {
		token, err := c.settleToken(ctx, l, rs, fenceArg(cfg), timeout, until)
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
	permanent, err := c.notObtained(ctx, l, t, interrupted, timeout)
	return nil, hint, permanent, err
}

// refusals adds to t's errors what the nodes that refused said, and returns
// the shortest remaining lease they reported (negative when none did).
func (c *core) refusals(t *tally, l *Lock, rs []reply) time.Duration {
	hint := time.Duration(-1)
	for _, r := range rs {
		if r.err == nil && !r.ok {
			t.errs = append(t.errs, c.nodeErr(r.node, errTaken))
			if d := time.Duration(r.val) * time.Millisecond; r.val >= 0 && (hint < 0 || d < hint) {
				hint = d
			}
		}
	}
	t.errs = appendTaken(t.errs, l, rs, hint)
	return hint
}

// notObtained ends an attempt that did not get the lock (Redlock step 5)
// and returns its error and whether retrying is pointless. It releases on
// every node that may hold our key: those that granted, released and waited
// for; those that failed or have not answered yet, released in the
// background, since they will not answer the release sooner than the
// attempt (a grant arriving after the release is released by its own call,
// see Lock.settle). Nodes that answered "taken" hold nothing of ours.
func (c *core) notObtained(ctx context.Context, l *Lock, t tally, interrupted bool, timeout time.Duration) (permanent bool, err error) {
	l.mu.Lock()
	l.transition(stateFailed, "")
	grantedOn, unknownOn := c.settledOn(l, granted), c.settledOn(l, failed, pending)
	l.mu.Unlock()
	c.releaseOn(ctx, l, grantedOn, timeout, never)
	c.releaseInBackground(ctx, unknownOn, l)
	errs := append([]error{ErrNotObtained}, t.errs...)
	if interrupted {
		errs = append(errs, ctx.Err())
	}
	return t.permanent > len(c.nodes)-c.quorum, errors.Join(errs...)
}

// acquireArgs are acquire.lua's KEYS and ARGV for one attempt of l, built
// once and shared, read-only, by the calls to every node.
//
// The script depends on the lock's kind (kinds.go). wait is a waiting
// writer's id in the queue of waiting writers (acquire.lua's ARGV[5]), ""
// for a call that does not wait; a first attempt's id is its own owner
// value, sent as the same boxed value. The fencing argument is fenceArg's.
func (c *core) acquireArgs(l *Lock, cfg *config, wait string) (*redis.Script, []string, []any) {
	// Constants boxed in an any cost no allocation; strings and numbers
	// computed at run time each cost one.
	var fence, floor any = fenceArg(cfg), ""
	if cfg.fencing && len(c.nodes) > 1 {
		// One floor for all masters, so that they mint the same token and the
		// write-back round of settleToken is needed only when a counter is
		// already past it. A single node uses its own TIME. go-redis sends
		// an int64 as its decimal digits, as it would the formatted string.
		floor = time.Now().UnixMicro()
	}
	owner := any(l.owner)
	switch l.kind {
	case kindRead:
		return scriptRLock, []string{l.keys[2], l.keys[0], l.keys[3]}, []any{owner, c.ttlArg(cfg.ttl)}
	case kindPermit:
		return scriptSemAcquire, []string{l.keys[0], l.keys[3], l.keys[2]}, []any{owner, c.ttlArg(cfg.ttl), fence, l.permits}
	case kindMulti:
		return scriptMultiAcquire, l.multi.acq[0], []any{owner, c.ttlArg(cfg.ttl), fence, floor}
	}
	var waitArg any = wait
	if wait == l.owner {
		waitArg = owner
	}
	switch {
	case l.metadata != "":
		return scriptAcquire, []string{l.keys[0], l.keys[1], l.keys[5]},
			[]any{owner, c.ttlArg(cfg.ttl), fence, floor, waitArg, metaValue(l.owner, l.metadata)}
	case wait != "":
		return scriptAcquire, l.keys[:2], []any{owner, c.ttlArg(cfg.ttl), fence, floor, waitArg}
	}
	return scriptAcquire, l.keys[:2], []any{owner, c.ttlArg(cfg.ttl), fence, floor}
}

// acquireOn runs acquire.lua on one node and says how it answered.
func (c *core) acquireOn(ctx context.Context, n *node, l *Lock, cfg *config, script *redis.Script, keys []string, args []any) (reply, outcome) {
	if err := c.identify(ctx, n); err != nil {
		return reply{err: err}, taken // nothing was sent: nothing of ours there
	}
	if l.parts() > 1 {
		return c.multiAcquireOn(ctx, n, l, cfg)
	}
	var cmd *redis.Cmd
	var ackErr error
	if cfg.replicas > 0 {
		cmd, ackErr = scriptAcked(ctx, n.client, script, keys, cfg.replicas, cfg.ackTimeout, args...)
	} else {
		cmd = script.Run(ctx, n.client, keys, args...)
	}
	res, holder, err := acquireReply(cmd)
	refusing := res[2] - 1 // multi_acquire.lua: the name that refused; -1 for the others
	switch {
	case err != nil:
		return reply{err: err}, failed
	case res[0] == replyOK && ackErr != nil:
		// Granted on the master but not known to the replicas asked for: not
		// a vote. The outcome stays granted, so the key is released.
		return reply{err: ackErr}, granted
	case res[0] == replyOK:
		return reply{ok: true, val: res[1]}, granted
	case res[0] == replyTaken:
		return reply{val: res[1], holder: holder, code: refusing}, taken
	case res[0] == replyExhausted:
		return reply{err: fmt.Errorf("%w (counter %s at %d)", errTokenSpace, l.keys[1], res[1])}, taken
	case res[0] == replyPermits:
		return reply{err: fmt.Errorf("%w: the semaphore %q is held under %d permits, this Semaphore has %d", errPermits, l.name, res[1], l.permits)}, taken
	case res[0] == replyBadFence:
		return reply{err: fmt.Errorf("%w: fence key %s does not hold a number", errTokenSpace, l.keys[1])}, taken
	}
	return reply{err: fmt.Errorf("%w: %v", errBadReply, res)}, failed
}

// multiAcquireOn takes a multi-name lock spread over shards, one part at a
// time in the names' global order. A part that refuses ends the attempt
// with the parts before it granted, and the outcome granted, so that the
// failed attempt releases them before it returns; an error ends it with
// the outcome failed (unknown), released the same way in the background.
// Each part mints its token from one time floor; when they differ, the
// counters below the largest are raised to it, so that one token is valid
// for every name.
func (c *core) multiAcquireOn(ctx context.Context, n *node, l *Lock, cfg *config) (reply, outcome) {
	fence, floor := fenceArg(cfg), ""
	if cfg.fencing {
		floor = strconv.FormatInt(time.Now().UnixMicro(), 10)
	}
	tokens := make([]int64, 0, l.parts())
	for p := range l.parts() {
		res, holder, err := acquireReply(scriptMultiAcquire.Run(ctx, n.client, l.multi.acq[p], l.owner, ttlMillis(cfg.ttl), fence, floor))
		// A refusal at part p leaves the parts before it ours: granted, so
		// the failed attempt releases them.
		before := granted
		if p == 0 {
			before = taken
		}
		switch {
		case err != nil:
			return reply{err: err}, failed
		case res[0] == replyTaken:
			return reply{val: res[1], holder: holder, code: int64(p)}, before
		case res[0] != replyOK:
			return reply{err: fmt.Errorf("%w (counter of %q)", errTokenSpace, l.multi.names[p])}, before
		}
		tokens = append(tokens, res[1])
	}
	token := slices.Max(tokens)
	for p, t := range tokens {
		if t == token {
			continue
		}
		fences := l.multi.acq[p][1:2] // one name per part
		if err := scriptRaise.Run(ctx, n.client, fences, strconv.FormatInt(token, 10), fence).Err(); err != nil {
			return reply{err: fmt.Errorf("redlock: raising the fence counter of %q to token %d: %w", l.multi.names[p], token, err)}, granted
		}
	}
	return reply{ok: true, val: token}, granted
}

// fenceArg is the scripts' fencing argument for cfg: "0" without fencing,
// else the fence counter's retention in ms, "1" standing for the default (a
// constant: no allocation).
func fenceArg(cfg *config) any {
	switch {
	case !cfg.fencing:
		return "0"
	case cfg.retention == defaultFenceRetention:
		return "1"
	}
	return cfg.retention.Milliseconds()
}

// settledOn returns the nodes whose acquire call for l answered one of
// outcomes; l.mu held.
func (c *core) settledOn(l *Lock, outcomes ...outcome) []*node {
	var out []*node
	for _, n := range c.nodes {
		if slices.Contains(outcomes, l.outcome[n.idx]) {
			out = append(out, n)
		}
	}
	return out
}

func ttlMillis(ttl time.Duration) int64 { return max(ttl.Milliseconds(), 1) }

// ttlArg is ttlMillis(ttl) as a script argument: boxed once for the core's
// default TTL, which most acquires and releases send.
func (c *core) ttlArg(ttl time.Duration) any {
	if ttl == c.cfg.ttl {
		return c.ttlBoxed
	}
	return ttlMillis(ttl)
}

// settleToken picks the fencing token of a granted attempt: the largest
// minted by the granting nodes. When they disagree (N > 1), it first raises
// the counters of the other nodes to it and waits until a majority holds a
// counter >= token, so any later quorum, which intersects that majority,
// mints a strictly larger token.
func (c *core) settleToken(ctx context.Context, l *Lock, rs []reply, fence any, timeout time.Duration, until time.Time) (int64, error) {
	if !l.fencing {
		return 0, nil
	}
	var token int64
	for _, r := range rs {
		if r.err == nil && r.ok && !c.nodes[r.node].isDup() {
			token = max(token, r.val)
		}
	}
	at := func(n *node) bool {
		r, ok := replyOf(rs, n.idx)
		return ok && r.err == nil && r.ok && r.val == token && !n.isDup()
	}
	atToken := 0
	for _, n := range c.nodes {
		if at(n) {
			atToken++
		}
	}
	if atToken >= c.quorum || atToken == len(c.nodes) {
		return token, nil // the usual case: no list of the nodes behind to build
	}
	var behind []*node
	for _, n := range c.nodes {
		if !at(n) {
			behind = append(behind, n)
		}
	}
	arg := strconv.FormatInt(token, 10)
	ch, err := c.fanOut(context.WithoutCancel(ctx), behind, timeout, timeout, func(ctx context.Context, n *node) reply {
		v, err := scriptRaise.Run(ctx, n.client, l.keys[1:2], arg, fence).Int64()
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

// named checks a call on one name and returns its config, the name's lock
// key and its release channel.
func (c *core) named(name string, opts []Option) (cfg *config, key, channel string, err error) {
	if c == nil {
		return nil, "", "", errNoCore
	}
	if name == "" {
		return nil, "", "", errors.New("redlock: empty lock name")
	}
	if cfg, err = c.callConfig(opts); err != nil {
		return nil, "", "", err
	}
	key, channel = keyAndChannel(cfg.prefix, name)
	return cfg, key, channel, nil
}

// lock is Lock (wait=true) and TryLock (wait=false).
func (c *core) lock(ctx context.Context, name string, opts []Option, wait bool) (*Lock, error) {
	cfg, key, channel, err := c.named(name, opts)
	if err != nil {
		return nil, err
	}
	a := acquisition{kind: kindExclusive, name: name, tag: key, channel: channel, cfg: cfg, queue: channel, held: key}
	// A waiting writer keeps new read holds out (writer preference).
	// Redlock offers no read holds: its masters need no entry.
	a.writer = wait && len(c.nodes) == 1
	return c.obtain(ctx, &a, wait)
}

// callConfig is the config of one call: the core's, shared read-only by
// calls without options, or a copy with opts applied.
func (c *core) callConfig(opts []Option) (*config, error) {
	if len(opts) == 0 {
		return &c.cfg, nil
	}
	own, err := c.cfg.with(opts)
	if err != nil {
		return nil, err
	}
	return &own, nil
}

// acquisition is what obtain needs to know of one acquire call: what to
// make an attempt at (attempt), and where to wait between attempts. It has
// no function fields, so that it and what it points to stay on the
// caller's stack.
type acquisition struct {
	kind    lockKind
	name    string
	tag     string // the name's lock key, or a semaphore's set key
	channel string // where its releases are published
	cfg     *config
	permits int        // a semaphore's
	multi   *multiKeys // a LockAll's
	// queue is the key of the local queue to wait in (wait.go); an attempt
	// may move it (a multi-name lock waits for the name that refused it).
	queue string
	// held is a lock key that, held by this core, makes a first attempt
	// pointless ("" for none).
	held string
	// writer: the call is a writer that waits, with an entry among the
	// name's waiting writers on the server (ww).
	writer bool
	ww     writerWait
}

// attempt makes one attempt of a: the lock, or an error matching
// ErrNotObtained with the holder's remaining lease (negative when unknown)
// and whether retrying is pointless.
func (c *core) attempt(ctx context.Context, a *acquisition) (*Lock, time.Duration, bool, error) {
	var l *Lock
	switch a.kind {
	case kindRead:
		l = c.newReadLock(a.name, a.tag, a.channel, a.cfg)
	case kindPermit:
		l = c.newPermit(a.name, a.tag, a.channel, a.cfg, a.permits)
	case kindMulti:
		l = c.newMultiLock(a.name, a.channel, a.cfg, a.multi)
	default:
		l = c.newLock(a.name, a.tag, a.channel, a.cfg)
	}
	var ww *writerWait
	if a.writer {
		ww = &a.ww
	}
	got, hint, permanent, err := c.acquire(ctx, l, a.cfg, ww)
	if a.kind == kindMulti && err != nil {
		var te *TakenError
		if errors.As(err, &te) && te.Name != "" {
			// Wait for the name that refused.
			a.queue = queueKey(releaseChannel(lockKey(a.cfg.prefix, te.Name)), queueMulti)
		}
	}
	return got, hint, permanent, err
}

// unwait takes a writer that gave up waiting out of its name's queue of
// waiting writers (unwait.lua), before its Lock call returns, as every key
// a failed call set: neither the writers behind it nor new read holds wait
// for its entry to lapse, and a name already passed to it passes on. The
// call is bounded by the node timeout like every other: on a hung server
// Lock returns at its ctx's end plus that, not at the client's read timeout
// and retries, and the entry lapses by itself (5s) if the call fails.
//
// After Close, when the core may start no goroutine, it still runs, from the
// caller's goroutine (as releaseOn does): a closed Locker's waiters must not
// leave entries that a release would reserve the name for.
func (c *core) unwait(ctx context.Context, a *acquisition) {
	keys := []string{a.tag + writersSuffix, a.tag}
	timeout := a.cfg.timeout(a.cfg.ttl)
	call := func(ctx context.Context, n *node) reply {
		return reply{err: scriptUnwait.Run(ctx, n.client, keys, a.ww.id, a.channel, ttlMillis(timeout)).Err()}
	}
	if _, _, err := c.round(detached(ctx), c.nodes, timeout, timeout, call, time.Now().Add(timeout), nil, never); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		call(cctx, c.nodes[0])
	}
}

// maxTrustedSleep caps a waiter's sleep while it relies on release messages:
// a subscription on a server that no longer gets the releases (a Sentinel
// failover moved the master, and go-redis does not move pub/sub connections)
// is found out within this time instead of a whole lease.
const maxTrustedSleep = time.Second

// do is Do: hold the lock while fn runs.
func (c *core) do(ctx context.Context, name string, fn func(context.Context) error, opts []Option) (err error) {
	if c == nil {
		return errNoCore
	}
	if fn == nil {
		return errors.New("redlock: nil function")
	}
	l, err := c.lock(ctx, name, opts, true)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(context.WithValue(ctx, lockKeyCtx{}, l))
	defer cancel(nil)
	// fn's ctx ends the moment the lock stops being held for any reason
	// other than Do's own Unlock below: lost, Close, an Unlock through
	// FromContext.
	l.onEnd(func(cause error) { cancel(cause) })
	defer func() {
		p := recover()
		uerr := l.Unlock(context.WithoutCancel(ctx))
		if p != nil {
			panic(p) // released first, then the panic goes on
		}
		switch lerr := l.Err(); {
		case errors.Is(lerr, ErrLost):
			// Lost, or Close released it while fn still ran (a LostError
			// with reason closed, which also matches ErrClosed).
			err = errors.Join(err, lerr)
		case errors.Is(uerr, errAlreadyReleased):
			// fn released the lock itself, through FromContext.
		case errors.Is(uerr, ErrNotHeld):
			// The nodes no longer had our key: lost while fn ran.
			err = errors.Join(err, fmt.Errorf("%w: %w", ErrLost, uerr))
		case uerr != nil:
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
