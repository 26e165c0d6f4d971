package node

import (
	"context"
	"maps"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/scripts"
)

// Client is the root package's Client (the part of a go-redis client the
// library uses), declared again here so that this package needs nothing
// from the root one; the root package checks that the two stay the same.
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// DivertedClient bounds the scripts run on a plain *redis.Client, which
// ignores ctx deadlines (go-redis's default), by the node timeout without a
// goroutine of ours watching each call (two cross-core wake-ups per call):
// they run on a clone of the client whose socket timeouts are the node
// timeout (WithTimeout: the same connection pool). A clone has none of the
// client's hooks, so the scripts are sent through the client, whose hooks
// (tracing, metrics) see them as every other command, and the innermost
// hook, diverter, hands them to the clone. A hook added to the client later
// goes inside the diverter, so the next call adds a new one, innermost
// again; the old one lets everything through.
//
// One DivertedClient serves every node on a client, from sharedDiverted.
type DivertedClient struct {
	parent *redis.Client
	mu     sync.Mutex // adding a diverter, making a clone
	// rebuilds counts the client's hook chains built since the active
	// diverter was added (go-redis calls every hook's DialHook for each:
	// AddHook rebuilds the chain); innermost is its value right after that
	// diverter's own rebuild: while they are equal, no hook went inside it.
	rebuilds  atomic.Uint64
	innermost atomic.Uint64
	active    atomic.Pointer[diverter]
	// dialErr is the error of the client's latest dial, nil after one that
	// connected: the cause of a call that go-redis's retries kept past the
	// node timeout, whose own error is then only the deadline.
	dialErr atomic.Pointer[error]
	clones  atomic.Pointer[map[time.Duration]*BoundedClient] // copy on write
}

// sharedDiverted holds the DivertedClient of each *redis.Client in use,
// keyed weakly: an entry goes when its client is garbage.
var sharedDiverted sync.Map // weak.Pointer[redis.Client] -> *DivertedClient

// DivertedOf returns c's DivertedClient, adding its diverter on first use.
func DivertedOf(c *redis.Client) *DivertedClient {
	key := weak.Make(c)
	if v, ok := sharedDiverted.Load(key); ok {
		return v.(*DivertedClient)
	}
	dc := &DivertedClient{parent: c}
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if v, loaded := sharedDiverted.LoadOrStore(key, dc); loaded {
		return v.(*DivertedClient)
	}
	runtime.AddCleanup(c, func(k weak.Pointer[redis.Client]) { sharedDiverted.Delete(k) }, key)
	dc.addDiverter()
	return dc
}

// addDiverter adds a new innermost diverter; dc.mu is held.
func (dc *DivertedClient) addDiverter() {
	d := &diverter{dc: dc}
	dc.active.Store(d)
	before := dc.rebuilds.Load()
	dc.parent.AddHook(d)
	if after := dc.rebuilds.Load(); after == before+1 {
		dc.innermost.Store(after)
	} // else a hook was added meanwhile, maybe inside d: the next call adds another
}

// KeepInnermost adds a new diverter when a hook went inside the active one.
func (dc *DivertedClient) KeepInnermost() {
	if dc.rebuilds.Load() != dc.innermost.Load() {
		dc.mu.Lock()
		if dc.rebuilds.Load() != dc.innermost.Load() {
			dc.addDiverter()
		}
		dc.mu.Unlock()
	}
}

// Through returns a Client whose scripts and pipelines go through the
// client's hooks to target, a client of the library's own (a node's
// tracking data connection): the hooks see them as every other command.
// Call KeepInnermost before each use, as bounded does.
func (dc *DivertedClient) Through(target *redis.Client) *BoundedClient {
	return &BoundedClient{Client: dc.parent, clone: target}
}

// bounded returns the Client whose scripts are bounded by timeout.
func (dc *DivertedClient) bounded(timeout time.Duration) *BoundedClient {
	dc.KeepInnermost()
	if m := dc.clones.Load(); m != nil {
		if b := (*m)[timeout]; b != nil {
			return b
		}
	}
	dc.mu.Lock()
	defer dc.mu.Unlock()
	old := dc.clones.Load()
	if old != nil && (*old)[timeout] != nil {
		return (*old)[timeout]
	}
	m := map[time.Duration]*BoundedClient{}
	if old != nil {
		maps.Copy(m, *old)
	}
	clone := dc.parent.WithTimeout(timeout)
	// The ctx deadline bounds the socket too: a call that waited for a
	// connection of a full pool then gets what is left of its node
	// timeout, not a whole one more (the clone's options are its own).
	clone.Options().ContextTimeoutEnabled = true
	// Batches go to a clone of their own that go-redis never retries: a
	// pipeline retried after a failed read sends again the scripts whose
	// replies were already read (a single command's retry sends only
	// itself). Their callers get the error, as of any call whose reply did
	// not come.
	batches := dc.parent.WithTimeout(timeout)
	batches.Options().ContextTimeoutEnabled = true
	batches.Options().MaxRetries = 0 // -1 only means 0 when a client is made
	b := &BoundedClient{Client: dc.parent, clone: clone, comb: &combiner{timeout: timeout, batches: batches}}
	m[timeout] = b
	dc.clones.Store(&m)
	return b
}

// diverter is DivertedClient's hook: it hands a boundedCmd to its clone
// while it is the active (innermost) diverter, and lets every other
// command, and every command once it is not, through.
type diverter struct{ dc *DivertedClient }

func (d *diverter) DialHook(next redis.DialHook) redis.DialHook {
	if d.dc.active.Load() == d {
		d.dc.rebuilds.Add(1)
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		switch {
		case err != nil:
			d.dc.dialErr.Store(&err)
		case d.dc.dialErr.Load() != nil:
			d.dc.dialErr.Store(nil)
		}
		return conn, err
	}
}

func (d *diverter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if bc, ok := cmd.(*boundedCmd); ok && d.dc.active.Load() == d {
			return bc.clone.Process(ctx, bc)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook hands a pipeline of a BoundedClient (its Exec marks
// the ctx) to the clone while d is the active diverter.
func (d *diverter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if clone, ok := ctx.Value(divertPipeline{}).(*redis.Client); ok && d.dc.active.Load() == d {
			_, err := clone.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, cmd := range cmds {
					_ = p.Process(ctx, cmd)
				}
				return nil
			})
			return err
		}
		return next(ctx, cmds)
	}
}

// divertPipeline is the ctx key under which a boundedPipeline's Exec names
// the clone its commands go to.
type divertPipeline struct{}

// BoundedClient is a Client whose scripts (EVAL, EVALSHA and their _RO
// forms, which go-redis's Script sends) and pipelines (an acquisition with
// WithReplicaAcks: script and WAIT) run bounded by its clone's socket
// timeouts; everything else goes to the client as it is.
type BoundedClient struct {
	*redis.Client
	clone *redis.Client
	// comb shares round trips among overlapping script calls (see
	// combiner); nil for a tracking data connection's, which is one
	// connection already.
	comb *combiner
}

// Pipeline is the client's pipeline, whose Exec goes through the client's
// hooks to the clone.
func (b *BoundedClient) Pipeline() redis.Pipeliner {
	return boundedPipeline{Pipeliner: b.Client.Pipeline(), clone: b.clone}
}

type boundedPipeline struct {
	redis.Pipeliner
	clone *redis.Client
}

func (p boundedPipeline) Exec(ctx context.Context) ([]redis.Cmder, error) {
	return p.Pipeliner.Exec(context.WithValue(ctx, divertPipeline{}, p.clone))
}

// boundedCmd is a script call that the diverter hands to clone.
type boundedCmd struct {
	redis.Cmd
	clone *redis.Client
}

// process sends the command argv through the client (its hooks) to the
// clone, alone or with other calls that overlap it (send).
func (b *BoundedClient) process(ctx context.Context, argv []any) *redis.Cmd {
	return b.send(ctx, &boundedCmd{Cmd: *redis.NewCmd(ctx, argv...), clone: b.clone})
}

func (b *BoundedClient) script(ctx context.Context, name, body string, keys []string, args []any) *redis.Cmd {
	return b.process(ctx, scriptCommand(name, body, keys, args))
}

func (b *BoundedClient) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.script(ctx, "eval", script, keys, args)
}

func (b *BoundedClient) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return b.script(ctx, "evalsha", sha1, keys, args)
}

func (b *BoundedClient) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.script(ctx, "eval_ro", script, keys, args)
}

func (b *BoundedClient) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return b.script(ctx, "evalsha_ro", sha1, keys, args)
}

// EvalArgs is the EVALSHA command running s with keys and args, as
// go-redis's Script.Run would build it on each call: built once, it serves
// every node of a round, and the boxed values it shares with other
// commands are boxed once.
func EvalArgs(s *redis.Script, keys []string, args []any) []any {
	return scriptCommand("evalsha", scripts.Sources[s].SHA, keys, args)
}

// scriptCommand is the command name (EVAL, EVALSHA...) running the script
// body or SHA1 with keys and args.
func scriptCommand(name, body any, keys []string, args []any) []any {
	argv := make([]any, 0, 3+len(keys)+len(args))
	argv = append(argv, name, body, len(keys))
	for _, k := range keys {
		argv = append(argv, k)
	}
	return append(argv, args...)
}

// RunEval sends argv (from EvalArgs) to cl, and on NOSCRIPT the script's
// body by EVAL, as Script.Run does. go-redis only reads argv, so one argv
// may be sent to several nodes at once.
func RunEval(ctx context.Context, cl Client, s *redis.Script, argv []any) *redis.Cmd {
	var again TryingAgain
	for {
		cmd := sendEval(ctx, cl, argv)
		if IsNoScript(cmd.Err()) {
			ev := slices.Clone(argv)
			ev[0], ev[1] = "eval", scripts.Sources[s].Body
			cmd = sendEval(ctx, cl, ev)
		}
		if !again.Retry(ctx, cmd.Err()) {
			return cmd
		}
	}
}

// TryingAgain is one script call's retries of TRYAGAIN; the zero value is
// ready to use.
type TryingAgain struct {
	wait time.Duration // the last wait
	n    int           // retries so far
}

// Retry says whether a script call that failed with err should be sent
// again, having waited first: while Redis Cluster answers TRYAGAIN, until
// ctx (a call's node timeout) ends. A script whose declared keys are split
// between the two nodes of a slot migration gets TRYAGAIN for as long as
// the split lasts, and go-redis retries it only MaxRedirects times, a few
// milliseconds apart; ASK and MOVED go-redis follows itself. The waits
// grow from 1ms to 20ms, and tryAgainTimes retries end it even under a ctx
// without deadline.
func (a *TryingAgain) Retry(ctx context.Context, err error) bool {
	if !redis.IsTryAgainError(err) || ctx.Err() != nil || a.n >= tryAgainTimes {
		return false
	}
	a.n++
	a.wait = max(time.Millisecond, min(2*a.wait, 20*time.Millisecond))
	TriedAgain.Add(1)
	t := GetTimer(a.wait)
	defer PutTimer(t)
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// TriedAgain counts the retries of TRYAGAIN (TryingAgain), for the
// tests' figures.
var TriedAgain atomic.Int64

// tryAgainTimes bounds one call's retries of TRYAGAIN: with waits of
// 20ms, some 20s.
const tryAgainTimes = 1000

// processor is what every go-redis client has: a way to send any command.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

func sendEval(ctx context.Context, cl Client, argv []any) *redis.Cmd {
	switch c := cl.(type) {
	case *BoundedClient:
		return c.process(ctx, argv)
	case processor:
		cmd := redis.NewCmd(ctx, argv...)
		_ = c.Process(ctx, cmd)
		return cmd
	}
	// A Client of the user's own making: the Scripter call of Script.Run.
	n := argv[2].(int)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = argv[3+i].(string)
	}
	if argv[0] == "eval" {
		return cl.Eval(ctx, argv[1].(string), keys, argv[3+n:]...)
	}
	return cl.EvalSha(ctx, argv[1].(string), keys, argv[3+n:]...)
}

// SentinelDialer is the dialer of a go-redis Sentinel client, whose dial
// asks a sentinel where the master is and moves the client there; nil for
// any other client.
func SentinelDialer(cl Client) func(context.Context, string, string) (net.Conn, error) {
	c, ok := cl.(*redis.Client)
	if !ok {
		return nil
	}
	if opt := c.Options(); opt.Addr == FailoverAddr && opt.Dialer != nil {
		return opt.Dialer
	}
	return nil
}

// FailoverAddr is the placeholder address in the options of a client made
// by redis.NewFailoverClient.
const FailoverAddr = "FailoverClient"
