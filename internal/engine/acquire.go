package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/scripts"
)

// One acquire attempt on every node: Redlock's steps 1 to 5, for every kind
// of lock. What a kind sends is in kinds.go; the wait between attempts is
// obtain.go; making the granted lock held is the core's (core.attempt).

// attempt is one acquire attempt of l on the nodes of p. It lives on the
// caller's stack; the calls to the nodes share its script arguments.
type attempt struct {
	p       *Pool
	l       *Hold
	cfg     *Config
	timeout time.Duration // the node timeout
	until   time.Time     // the validity if granted: T1 + TTL - drift

	// What the round found: its replies' tally, whether the caller's ctx
	// cut it short, the holder's shortest remaining lease (negative when
	// unknown), and the fencing token of a grant.
	t           tally
	interrupted bool
	hint        time.Duration
	token       int64
	// firm is the owner the round found holding the name on a quorum of
	// nodes ("" when none did); contested says that no owner did while the
	// name was split between owners, this attempt's grants included.
	firm      string
	contested bool
}

// command builds the attempt's acquire call, the same for every node. argv is the whole
// EVALSHA command when one call per node carries it (no parts, no replica
// acks), boxed once for all nodes; an exclusive lock keeps the boxed key,
// owner and lease for its release (releaseArgv).
func (at *attempt) command(ttl any, wait string) (script *redis.Script, keys []string, args, argv []any) {
	l, cfg := at.l, at.cfg
	fence, floor := fenceArg(cfg), any("")
	if cfg.Fencing {
		// The token's time floor is this client's clock: no TIME on the
		// server. On a Redlock one floor for all masters, so that they mint
		// the same token and the write-back round of settleToken is needed
		// only when a counter is already past it. go-redis sends an int64
		// as its decimal digits, as it would the formatted string.
		now := time.Now().UnixMicro()
		if l.Kind == KindExclusive {
			l.fenceFloor.set(cfg, now)
			fence = &l.fenceFloor
		} else {
			floor = now
		}
	}
	script, keys, args = kinds[l.Kind].acquire(l, ttl, fence, floor, wait)
	if parts(l) == 1 && cfg.Replicas == 0 {
		argv = node.EvalArgs(script, keys, args)
		if l.Kind == KindExclusive {
			// exclusiveAcquire's ARGV starts with the owner and the lease.
			l.boxed = boxedArgs{key: argv[3], owner: args[0], lease: args[1]}
			if len(keys) > 3 {
				// The queue key and the waiting mark, also release.lua's.
				l.boxed.queue, l.boxed.waiting = argv[5], argv[6]
			}
		}
	}
	return script, keys, args, argv
}

// run sends the attempt and reports whether a quorum granted it and its
// fencing token is settled (at.token); err is a round that could not be
// sent at all (Close). Otherwise, and when the caller finds the validity
// used up, fail must end it. ttl is the boxed lease (config.ttlArg), wait a
// waiting writer's id ("" for none).
func (at *attempt) run(ctx context.Context, ttl any, wait string) (bool, error) {
	p, l, cfg, timeout := at.p, at.l, at.cfg, at.timeout
	script, keys, args, argv := at.command(ttl, wait)
	// Redlock step 1: T1 before the first request; every key set by this
	// attempt expires no earlier than T1+TTL on its server.
	t1 := time.Now()
	at.until = ValidUntil(t1, cfg.TTL, cfg.DriftFactor)
	call := func(ctx context.Context, n *node.Node, cl node.Client) Reply {
		if !p.send(n) {
			// A master that did not answer its last call gets no more
			// than a probe now and then (node.admit): the others' answers
			// decide this round anyway.
			l.settle(n.Idx, unsent)
			return Reply{Err: n.TimedOut(), unsent: true}
		}
		r, o := acquireOn(ctx, p, n, cl, l, cfg, script, keys, args, argv)
		if l.settle(n.Idx, o) {
			// The reply arrived after the attempt was given up or the lock
			// released or lost: nobody else will delete this key, so we do.
			// A grant is known to have run: one release. An error leaves
			// the outcome unknown: released until the node answers.
			p.releaseLater(ctx, n, l, o == granted)
		}
		return r
	}
	// Step 2: wait for a quorum (returning without stragglers), for its
	// impossibility, or for the per-node timeout, whichever is first.
	rs, interrupted, err := p.Round(Detached(ctx), p.Nodes, timeout, timeout, call, earliest(t1.Add(timeout), at.until), ctx.Done(), p.Settled)
	if err != nil {
		return false, err
	}
	at.interrupted = interrupted
	at.t = p.Count(rs)
	ReportNodes(cfg.Observer, l.Name, OpAcquire, at.t.Errs...)
	at.hint = at.refusals(rs)
	if at.t.OK < p.Quorum {
		at.firm, at.contested = at.holders(rs, at.t.OK)
	}
	if at.t.OK < p.Quorum || interrupted {
		return false, nil
	}
	token, err := at.settleToken(ctx, rs)
	if err != nil {
		at.t.Errs = append(at.t.Errs, err)
		return false, nil
	}
	at.token = token
	return true, nil
}

// holders reads who refused a round that got ok grants: firm is the owner
// holding the name on a quorum of nodes, or ""; contested is true on a
// Redlock when no owner does and the name is split between owners (this
// attempt's grants count as one): contenders that split the masters
// between them, whose retries must not stay in step (obtaining.jitter).
// A name reserved for a waiting writer or held by read holds has no firm
// holder: its refusal names none that a release message would.
func (at *attempt) holders(rs []Reply, ok int) (firm string, contested bool) {
	p := at.p
	owners := 0
	if ok > 0 {
		owners = 1
	}
	for i, r := range rs {
		if r.Err != nil || r.OK || r.holder == "" || strings.HasPrefix(r.holder, scripts.ReservedPrefix) {
			continue
		}
		if slices.ContainsFunc(rs[:i], func(o Reply) bool { return o.Err == nil && !o.OK && o.holder == r.holder }) {
			continue // counted with its first node
		}
		owners++
		n := 0
		for _, o := range rs[i:] {
			if o.Err == nil && !o.OK && o.holder == r.holder && !p.Nodes[o.Node].IsDup() {
				n++
			}
		}
		if n >= p.Quorum {
			return r.holder, false
		}
	}
	return "", len(p.Nodes) > 1 && owners > 1
}

// refusals adds to the tally's errors what the nodes that refused said, and
// returns the shortest remaining lease they reported (negative when none
// did).
func (at *attempt) refusals(rs []Reply) time.Duration {
	hint := time.Duration(-1)
	for _, r := range rs {
		if r.Err == nil && !r.OK {
			// Quiet: the TakenError below names the holder.
			at.t.Errs = append(at.t.Errs, Say.Quiet(at.p.NodeErr(r.Node, node.ErrTaken)))
			if d := time.Duration(r.val) * time.Millisecond; r.val >= 0 && (hint < 0 || d < hint) {
				hint = d
			}
		}
	}
	at.t.Errs = appendTaken(at.t.Errs, at.l, rs, hint)
	return hint
}

// fail ends an attempt that did not get the lock (Redlock step 5) and
// returns its error and whether retrying is pointless. It releases on every
// node that may hold our key: those that granted, released and waited for;
// those that failed or have not answered yet, released in the background,
// since they will not answer the release sooner than the attempt (a grant
// arriving after the release is released by its own call, see Lock.settle).
// Nodes that answered "taken" hold nothing of ours.
func (at *attempt) fail(ctx context.Context) (permanent bool, err error) {
	grantedOn, unknownOn := at.l.fail(at.p.Nodes)
	at.p.releaseOn(ctx, at.l, grantedOn, at.timeout, Never)
	at.p.releaseInBackground(ctx, unknownOn, at.l)
	errs := append([]error{Say.NotObtained(at.l.Name)}, at.t.Errs...)
	if at.interrupted {
		errs = append(errs, ctx.Err())
	}
	return at.t.permanent > len(at.p.Nodes)-at.p.Quorum, Say.Join(errs...)
}

// settleToken picks the fencing token of a granted attempt: the largest
// minted by the granting nodes. When they disagree (N > 1), it first raises
// the counters of the other nodes to it and waits until a majority holds a
// counter >= token, so any later quorum, which intersects that majority,
// mints a strictly larger token. A raised counter keeps at least the
// default retention (raise.lua without one), as WithFenceRetention says.
func (at *attempt) settleToken(ctx context.Context, rs []Reply) (int64, error) {
	p, l := at.p, at.l
	if !l.fencing {
		return 0, nil
	}
	var token int64
	for _, r := range rs {
		if r.Err == nil && r.OK && !p.Nodes[r.Node].IsDup() {
			token = max(token, r.val)
		}
	}
	atTok := func(n *node.Node) bool {
		r, ok := replyOf(rs, n.Idx)
		return ok && r.Err == nil && r.OK && r.val == token && !n.IsDup()
	}
	atToken := 0
	for _, n := range p.Nodes {
		if atTok(n) {
			atToken++
		}
	}
	if atToken >= p.Quorum || atToken == len(p.Nodes) {
		return token, nil // the usual case: no list of the nodes behind to build
	}
	var behind []*node.Node
	for _, n := range p.Nodes {
		if !atTok(n) {
			behind = append(behind, n)
		}
	}
	arg, counter, timeout := strconv.FormatInt(token, 10), fenceKeys(l), at.timeout
	need := p.Quorum - atToken
	got, interrupted, err := p.Round(Detached(ctx), behind, timeout, timeout, func(ctx context.Context, n *node.Node, cl node.Client) Reply {
		v, err := scripts.Raise.Run(ctx, cl, counter, arg).Int64()
		return Reply{OK: err == nil && v >= token, val: v, Err: err}
	}, earliest(time.Now().Add(timeout), at.until), ctx.Done(), func(rs []Reply) bool {
		return p.Count(rs).OK >= need
	})
	if err != nil {
		return 0, err
	}
	if t := p.Count(got); t.OK < need {
		errs := append([]error{fmt.Errorf("redlock: fencing token %d reached %d of %d nodes, need a majority", token, atToken+t.OK, len(p.Nodes))}, t.Errs...)
		if cerr := CtxErrIf(ctx, interrupted); cerr != nil {
			errs = append(errs, cerr) // the caller's ctx ended the write-back
		}
		return 0, Say.Join(errs...)
	}
	return token, nil
}

// acquireOn runs acquire.lua on one node and says how it answered.
func acquireOn(ctx context.Context, p *Pool, n *node.Node, cl node.Client, l *Hold, cfg *Config, script *redis.Script, keys []string, args, argv []any) (Reply, outcome) {
	if err := p.Ids.Identify(ctx, n); err != nil {
		return Reply{Err: err}, taken // nothing was sent: nothing of ours there
	}
	if parts(l) > 1 {
		return multiAcquireOn(ctx, cl, l, cfg)
	}
	var cmd *redis.Cmd
	var ackErr error
	if cfg.Replicas > 0 {
		cmd, ackErr = scriptAcked(ctx, cl, script, keys, cfg.Replicas, cfg.AckTimeout, args...)
	} else {
		cmd = node.RunEval(ctx, cl, script, argv)
	}
	res, holder, err := acquireReply(cmd)
	refusing := res[2] - 1 // multi_acquire.lua: the name that refused; -1 for the others
	switch {
	case err != nil:
		return Reply{Err: err}, failed
	case res[0] == scripts.ReplyOK && ackErr != nil:
		// Granted on the master but not known to the replicas asked for: not
		// a vote. The outcome stays granted, so the key is released.
		return Reply{Err: ackErr}, granted
	case res[0] == scripts.ReplyOK:
		return Reply{OK: true, val: res[1]}, granted
	case res[0] == scripts.ReplyTaken:
		return Reply{val: res[1], holder: holder, Code: refusing}, taken
	case res[0] == scripts.ReplyExhausted:
		return Reply{Err: fmt.Errorf("%w (counter %s at %d)", node.ErrTokenSpace, fenceKey(l), res[1])}, taken
	case res[0] == scripts.ReplyPermits:
		return Reply{Err: fmt.Errorf("%w: the semaphore %q is held under %d permits, this Semaphore has %d", node.ErrPermits, l.Name, res[1], l.permits)}, taken
	case res[0] == scripts.ReplyBadFence:
		return Reply{Err: fmt.Errorf("%w: fence key %s does not hold a number", node.ErrTokenSpace, fenceKey(l))}, taken
	}
	return Reply{Err: fmt.Errorf("%w: %v", node.ErrBadReply, res)}, failed
}

// multiAcquireOn takes a multi-name lock spread over shards, one part at a
// time in the names' global order. A part that refuses ends the attempt
// with the parts before it granted, and the outcome granted, so that the
// failed attempt releases them before it returns; an error ends it with
// the outcome failed (unknown), released the same way in the background.
// Each part mints its token from one time floor; when they differ, the
// counters below the largest are raised to it, so that one token is valid
// for every name.
func multiAcquireOn(ctx context.Context, cl node.Client, l *Hold, cfg *Config) (Reply, outcome) {
	fence, floor := fenceArg(cfg), ""
	if cfg.Fencing {
		floor = strconv.FormatInt(time.Now().UnixMicro(), 10)
	}
	tokens := make([]int64, 0, parts(l))
	for p := range parts(l) {
		res, holder, err := acquireReply(scripts.MultiAcquire.Run(ctx, cl, l.Multi.acq[p], l.Owner, ttlMillis(cfg.TTL), fence, floor))
		// A refusal at part p leaves the parts before it ours: granted, so
		// the failed attempt releases them.
		before := granted
		if p == 0 {
			before = taken
		}
		switch {
		case err != nil:
			return Reply{Err: err}, failed
		case res[0] == scripts.ReplyTaken:
			return Reply{val: res[1], holder: holder, Code: int64(p)}, before
		case res[0] != scripts.ReplyOK:
			return Reply{Err: fmt.Errorf("%w (counter of %q)", node.ErrTokenSpace, l.Multi.Names[p])}, before
		}
		tokens = append(tokens, res[1])
	}
	token := slices.Max(tokens)
	for p, t := range tokens {
		if t == token {
			continue
		}
		fences := l.Multi.acq[p][1:2] // one name per part; the default retention, as settleToken's
		if err := scripts.Raise.Run(ctx, cl, fences, strconv.FormatInt(token, 10)).Err(); err != nil {
			return Reply{Err: fmt.Errorf("redlock: raising the fence counter of %q to token %d: %w", l.Multi.Names[p], token, err)}, granted
		}
	}
	return Reply{OK: true, val: token}, granted
}

// Acquisition is what an acquire call is about: what to make attempts at
// (core.attempt), and where to wait between them (obtaining). It has
// no function fields, so that it and what it points to stay on the
// caller's stack.
type Acquisition struct {
	Kind    lockKind
	Name    string
	Tag     string // the name's lock key, or a semaphore's set key
	Channel string // where its releases are published
	Cfg     *Config
	Permits int        // a semaphore's
	Multi   *multiKeys // a LockAll's
	// Queue is the key of the local queue to wait in (queue.go); an attempt
	// may move it (a multi-name lock waits for the name that refused it).
	Queue string
	// Held is a lock key that, held by this core, makes a first attempt
	// pointless ("" for none).
	Held string
	// writer: the call is a writer that waits, with an entry among the
	// name's waiting writers on the server (ww).
	writer bool
	ww     writerWait
}

// waitID is a's id among the waiting writers of its name (acquire.lua's
// ARGV[4]), "" for a call that is no waiting writer: a first attempt's
// owner value names the caller for the rest of its Lock call. It carries
// UnmarkedPrefix while the call is unmarked (writerWait).
func (a *Acquisition) waitID(l *Hold) string {
	if !a.writer {
		return ""
	}
	if a.ww.id == "" {
		a.ww.id = l.Owner
	}
	if a.ww.unmarked {
		return scripts.UnmarkedPrefix + a.ww.id
	}
	return a.ww.id
}

// appendTaken adds to errs a TakenError for the nodes in rs that refused
// l because another owner held the key; hint is the shortest lease among
// them. For a multi-name lock it names the name that was held.
func appendTaken(errs []error, l *Hold, rs []Reply, hint time.Duration) []error {
	var name, owner string
	var nodes []int
	for _, r := range rs {
		if r.Err != nil || r.OK {
			continue
		}
		if nodes == nil {
			name = l.Name
			if l.Multi != nil && r.Code >= 0 && int(r.Code) < len(l.Multi.Names) {
				name = l.Multi.Names[r.Code]
			}
			owner = r.holder
		}
		nodes = append(nodes, r.Node)
	}
	if nodes == nil {
		return errs
	}
	return append(errs, Say.Taken(name, owner, hint, nodes))
}

// acquireReply reads acquire.lua's reply: status and value, plus the
// holder's owner value on refusal; res[2] is the 1-based index of the name
// that refused a multi_acquire.lua call, 0 for the other scripts.
func acquireReply(cmd *redis.Cmd) (res [3]int64, holder string, err error) {
	if tok, ok := cmd.Val().(int64); ok {
		return [3]int64{scripts.ReplyOK, tok}, "", nil // acquire.lua's grant: the token alone
	}
	vals, err := cmd.Slice()
	if err != nil {
		return res, "", err
	}
	if len(vals) < 2 || len(vals) > 4 {
		return res, "", fmt.Errorf("%w: %v", node.ErrBadReply, vals)
	}
	for i := range 2 {
		v, ok := vals[i].(int64)
		if !ok {
			return res, "", fmt.Errorf("%w: %v", node.ErrBadReply, vals)
		}
		res[i] = v
	}
	if len(vals) >= 3 {
		holder, _ = vals[2].(string)
	}
	if len(vals) == 4 {
		// multi_acquire.lua: which of the names refused.
		i, ok := vals[3].(int64)
		if !ok {
			return res, "", fmt.Errorf("%w: %v", node.ErrBadReply, vals)
		}
		res[2] = i
	}
	return res, holder, nil
}
