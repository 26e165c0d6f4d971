package redlock

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

// Client is the part of a go-redis client the library uses: scripts,
// pipelines (renewals, releases at Close, INFO), and SUBSCRIBE for waiting.
// *redis.Client (standalone or the Sentinel failover client),
// *redis.ClusterClient and *redis.Ring all satisfy it, and so does
// redis.UniversalClient and any wrapper of your own that provides these
// methods (redis.Scripter is what go-redis's Script needs to run).
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
	_ Client = (*redis.Ring)(nil)
	_ Client = redis.UniversalClient(nil)
)

// divertedClient bounds the scripts run on a plain *redis.Client, which
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
// One divertedClient serves every node on a client, from sharedDiverted.
type divertedClient struct {
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
	clones  atomic.Pointer[map[time.Duration]*boundedClient] // copy on write
}

// sharedDiverted holds the divertedClient of each *redis.Client in use,
// keyed weakly: an entry goes when its client is garbage.
var sharedDiverted sync.Map // weak.Pointer[redis.Client] -> *divertedClient

// divertedOf returns c's divertedClient, adding its diverter on first use.
func divertedOf(c *redis.Client) *divertedClient {
	key := weak.Make(c)
	if v, ok := sharedDiverted.Load(key); ok {
		return v.(*divertedClient)
	}
	dc := &divertedClient{parent: c}
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if v, loaded := sharedDiverted.LoadOrStore(key, dc); loaded {
		return v.(*divertedClient)
	}
	runtime.AddCleanup(c, func(k weak.Pointer[redis.Client]) { sharedDiverted.Delete(k) }, key)
	dc.addDiverter()
	return dc
}

// addDiverter adds a new innermost diverter; dc.mu is held.
func (dc *divertedClient) addDiverter() {
	d := &diverter{dc: dc}
	dc.active.Store(d)
	before := dc.rebuilds.Load()
	dc.parent.AddHook(d)
	if after := dc.rebuilds.Load(); after == before+1 {
		dc.innermost.Store(after)
	} // else a hook was added meanwhile, maybe inside d: the next call adds another
}

// keepInnermost adds a new diverter when a hook went inside the active one.
func (dc *divertedClient) keepInnermost() {
	if dc.rebuilds.Load() != dc.innermost.Load() {
		dc.mu.Lock()
		if dc.rebuilds.Load() != dc.innermost.Load() {
			dc.addDiverter()
		}
		dc.mu.Unlock()
	}
}

// through returns a Client whose scripts and pipelines go through the
// client's hooks to target, a client of the library's own (a node's
// tracking data connection): the hooks see them as every other command.
// Call keepInnermost before each use, as bounded does.
func (dc *divertedClient) through(target *redis.Client) *boundedClient {
	return &boundedClient{Client: dc.parent, clone: target}
}

// bounded returns the Client whose scripts are bounded by timeout.
func (dc *divertedClient) bounded(timeout time.Duration) *boundedClient {
	dc.keepInnermost()
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
	m := map[time.Duration]*boundedClient{}
	if old != nil {
		maps.Copy(m, *old)
	}
	clone := dc.parent.WithTimeout(timeout)
	// The ctx deadline bounds the socket too: a call that waited for a
	// connection of a full pool then gets what is left of its node
	// timeout, not a whole one more (the clone's options are its own).
	clone.Options().ContextTimeoutEnabled = true
	b := &boundedClient{Client: dc.parent, clone: clone}
	m[timeout] = b
	dc.clones.Store(&m)
	return b
}

// diverter is divertedClient's hook: it hands a boundedCmd to its clone
// while it is the active (innermost) diverter, and lets every other
// command, and every command once it is not, through.
type diverter struct{ dc *divertedClient }

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

// ProcessPipelineHook hands a pipeline of a boundedClient (its Exec marks
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

// boundedClient is a Client whose scripts (EVAL, EVALSHA and their _RO
// forms, which go-redis's Script sends) and pipelines (an acquisition with
// WithReplicaAcks: script and WAIT) run bounded by its clone's socket
// timeouts; everything else goes to the client as it is.
type boundedClient struct {
	*redis.Client
	clone *redis.Client
}

// Pipeline is the client's pipeline, whose Exec goes through the client's
// hooks to the clone.
func (b *boundedClient) Pipeline() redis.Pipeliner {
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
// clone.
func (b *boundedClient) process(ctx context.Context, argv []any) *redis.Cmd {
	bc := &boundedCmd{Cmd: *redis.NewCmd(ctx, argv...), clone: b.clone}
	_ = b.Client.Process(ctx, bc)
	return &bc.Cmd
}

func (b *boundedClient) script(ctx context.Context, name, body string, keys []string, args []any) *redis.Cmd {
	return b.process(ctx, scriptCommand(name, body, keys, args))
}

func (b *boundedClient) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.script(ctx, "eval", script, keys, args)
}

func (b *boundedClient) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return b.script(ctx, "evalsha", sha1, keys, args)
}

func (b *boundedClient) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.script(ctx, "eval_ro", script, keys, args)
}

func (b *boundedClient) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return b.script(ctx, "evalsha_ro", sha1, keys, args)
}

// evalArgs is the EVALSHA command running s with keys and args, as
// go-redis's Script.Run would build it on each call: built once, it serves
// every node of a round, and the boxed values it shares with other
// commands are boxed once.
func evalArgs(s *redis.Script, keys []string, args []any) []any {
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

// runEval sends argv (from evalArgs) to cl, and on NOSCRIPT the script's
// body by EVAL, as Script.Run does. go-redis only reads argv, so one argv
// may be sent to several nodes at once.
func runEval(ctx context.Context, cl Client, s *redis.Script, argv []any) *redis.Cmd {
	var again tryingAgain
	for {
		cmd := sendEval(ctx, cl, argv)
		if isNoScript(cmd.Err()) {
			ev := slices.Clone(argv)
			ev[0], ev[1] = "eval", scripts.Sources[s].Body
			cmd = sendEval(ctx, cl, ev)
		}
		if !again.retry(ctx, cmd.Err()) {
			return cmd
		}
	}
}

// tryingAgain is one script call's retries of TRYAGAIN; the zero value is
// ready to use.
type tryingAgain struct {
	wait time.Duration // the last wait
	n    int           // retries so far
}

// retry says whether a script call that failed with err should be sent
// again, having waited first: while Redis Cluster answers TRYAGAIN, until
// ctx (a call's node timeout) ends. A script whose declared keys are split
// between the two nodes of a slot migration gets TRYAGAIN for as long as
// the split lasts, and go-redis retries it only MaxRedirects times, a few
// milliseconds apart; ASK and MOVED go-redis follows itself. The waits
// grow from 1ms to 20ms, and tryAgainTimes retries end it even under a ctx
// without deadline.
func (a *tryingAgain) retry(ctx context.Context, err error) bool {
	if !redis.IsTryAgainError(err) || ctx.Err() != nil || a.n >= tryAgainTimes {
		return false
	}
	a.n++
	a.wait = max(time.Millisecond, min(2*a.wait, 20*time.Millisecond))
	triedAgain.Add(1)
	t := getTimer(a.wait)
	defer putTimer(t)
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// triedAgain counts the retries of TRYAGAIN (tryingAgain), for the
// tests' figures.
var triedAgain atomic.Int64

// tryAgainTimes bounds one call's retries of TRYAGAIN: with waits of
// 20ms, some 20s.
const tryAgainTimes = 1000

// processor is what every go-redis client has: a way to send any command.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

func sendEval(ctx context.Context, cl Client, argv []any) *redis.Cmd {
	switch c := cl.(type) {
	case *boundedClient:
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

// sentinelDialer is the dialer of a go-redis Sentinel client, whose dial
// asks a sentinel where the master is and moves the client there; nil for
// any other client.
func sentinelDialer(cl Client) func(context.Context, string, string) (net.Conn, error) {
	c, ok := cl.(*redis.Client)
	if !ok {
		return nil
	}
	if opt := c.Options(); opt.Addr == failoverAddr && opt.Dialer != nil {
		return opt.Dialer
	}
	return nil
}
