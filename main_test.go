package redlock

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/internal/scripts"
)

// TestMain fails the run if any goroutine outlives the tests: every Locker
// and Redlock is closed, every client closed, every server stopped. One of
// go-redis's own is let go: after a refused dial its pool redials in the
// background, sleeping 1s between tries, and that goroutine notices only
// after its sleep that the client was closed; a test that ends right after
// refused dials (a killed server) would otherwise fail the run by its timing.
// go-redis's log of those dials is turned off (redistest.QuietGoRedis).
//
// Unless the command line sets -parallel, parallelTests of the tests that
// call t.Parallel run at once: they start servers of their own and spend
// their time waiting on leases, timeouts and killed servers, not computing,
// and go test's default (GOMAXPROCS, 2 on a 2-core machine) left the CPU
// idle most of a 3-minute run. A test with a tight wall-clock bound (a
// Done within timerSlack of Until, a call back within 50ms) does not call
// t.Parallel: go test runs those first, one at a time, before any parallel
// one starts.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", strconv.Itoa(max(parallelTests, runtime.GOMAXPROCS(0)))); err != nil {
			panic(err)
		}
	}
	redistest.QuietGoRedis()
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// parallelTests is the default -parallel of this package (see TestMain).
const parallelTests = 4

// newLocker returns a Locker on client, closed when the test ends.
func newLocker(t testing.TB, client Client, opts ...Option) *Locker {
	t.Helper()
	lk, err := NewLocker(client, opts...)
	if err != nil {
		t.Fatalf("NewLocker() = %v", err)
	}
	t.Cleanup(func() { lk.Close() })
	return lk
}

// miniClient returns a client to a fresh miniredis and the server.
func miniClient(t testing.TB) (*redis.Client, *miniredis.Miniredis) {
	t.Helper()
	mr := miniredis.RunT(t)
	cl := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { cl.Close() })
	return cl, mr
}

// get reads a key for assertions; "" when it does not exist.
func get(t testing.TB, cl *redis.Client, key string) string {
	t.Helper()
	v, err := cl.Get(context.Background(), key).Result()
	if err != nil && err != redis.Nil {
		t.Fatalf("GET %s = %v", key, err)
	}
	return v
}

// startCluster starts a one-node Redis Cluster owning every slot and returns
// a ClusterClient to it. One node is enough to catch CROSSSLOT: cluster mode
// refuses a script whose keys hash to different slots on any node count.
func startCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	srv := redistest.Start(t, "--cluster-enabled", "yes")
	srv.Do(t, "CLUSTER", "ADDSLOTSRANGE", "0", "16383")
	// Polls an external process until it reports the cluster ready.
	if !eventuallyEvery(10*time.Second, 50*time.Millisecond, func() bool {
		return strings.Contains(fmt.Sprint(srv.Do(t, "CLUSTER", "INFO")), "cluster_state:ok")
	}) {
		t.Fatalf("cluster state not ok after 10s: %v", srv.Do(t, "CLUSTER", "INFO"))
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}, MaxRedirects: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// acquirer is the acquire call of a Locker or a Redlock.
type acquirer interface {
	Lock(ctx context.Context, name string, opts ...Option) (*Lock, error)
}

// hammered is what hammer recorded.
type hammered struct {
	tokens []int64         // in order of holding
	waits  []time.Duration // how long each Lock call waited
}

// hammer runs workers goroutines that each take the lock name iters times
// and, while holding it, increment key on cl with a non-atomic GET then SET:
// two holders at once would lose an update. It fails the test on any error,
// on an overlap, on a wrong final count, and on tokens that do not strictly
// increase in the order the lock was held.
func hammer(t *testing.T, lk acquirer, cl *redis.Client, name, key string, workers, iters int) hammered {
	t.Helper()
	ctx := context.Background()
	var (
		mu       sync.Mutex
		rec      hammered
		inside   atomic.Int32
		overlaps atomic.Int32
		wg       sync.WaitGroup
		errs     = make(chan error, workers)
	)
	for range workers {
		wg.Go(func() {
			for range iters {
				lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				t0 := time.Now()
				l, err := lk.Lock(lctx, name)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("Lock() = %w", err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				rec.tokens = append(rec.tokens, l.Token())
				rec.waits = append(rec.waits, time.Since(t0))
				mu.Unlock()
				n, err := cl.Get(ctx, key).Int()
				if err != nil && !errors.Is(err, redis.Nil) {
					errs <- err
					return
				}
				if err := cl.Set(ctx, key, n+1, 0).Err(); err != nil {
					errs <- err
					return
				}
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					errs <- fmt.Errorf("Unlock() = %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("worker: %v", err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d times two holders were inside the critical section at once, want 0", n)
	}
	if got := get(t, cl, key); got != strconv.Itoa(workers*iters) {
		t.Errorf("counter = %s, want %d", got, workers*iters)
	}
	for i := 1; i < len(rec.tokens); i++ {
		if rec.tokens[i] <= rec.tokens[i-1] {
			t.Fatalf("token %d = %d after %d, want strictly increasing in order of holding", i, rec.tokens[i], rec.tokens[i-1])
		}
	}
	return rec
}

// eventually polls cond every few ms until it holds or d passes. It waits on
// an external process (redis-server resuming work), not on our own code.
func eventually(d time.Duration, cond func() bool) bool {
	return eventuallyEvery(d, 5*time.Millisecond, cond)
}

func eventuallyEvery(d, every time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(every)
	}
	return cond()
}

// waiting blocks until a Lock call of c is queued on name.
func waiting(t testing.TB, c *engine.Core, name string) {
	t.Helper()
	ch := engine.ReleaseChannel(engine.LockKey(c.Cfg.Prefix, name))
	if !eventually(2*time.Second, func() bool { return c.Waits.Busy(ch) }) {
		t.Fatalf("no waiter queued on %q", name)
	}
}

// waitBehind starts lk.Lock(name, opts...) in a goroutine and returns once
// the call waits in lk's queue for name; the function it returns gives the
// call's lock (failing t on an error).
func waitBehind(t *testing.T, lk *Locker, name string, opts ...Option) func() *Lock {
	t.Helper()
	got := make(chan *Lock, 1)
	go func() {
		w, err := lk.Lock(context.Background(), name, opts...)
		assert.NoError(t, err, "the waiting Lock(%q)", name)
		got <- w
	}()
	waiting(t, lk.c, name)
	return func() *Lock {
		t.Helper()
		w := <-got
		require.NotNil(t, w)
		return w
	}
}

// writersQueued waits until the server-side queue of waiting writers of
// name (default prefix) holds n entries.
func writersQueued(t testing.TB, srv *redistest.Server, name string, n int64) {
	t.Helper()
	cl := srv.Client(t)
	key := rlKey(name) + scripts.QueueSuffix
	if !eventually(5*time.Second, func() bool {
		got, err := queuedWriters(cl, key)
		return err == nil && got == n
	}) {
		t.Fatalf("queue %s never held %d waiting writers", key, n)
	}
}

// commandCalls reads how often the server ran cmd (INFO commandstats).
func commandCalls(t testing.TB, srv *redistest.Server, cmd string) int {
	t.Helper()
	info, _ := srv.Do(t, "INFO", "commandstats").(string)
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// deadlineClient is a client with ContextTimeoutEnabled: the library then
// calls it inline, relying on the client to cut calls at the deadline.
func deadlineClient(t testing.TB, srv *redistest.Server) *redis.Client {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { cl.Close() })
	return cl
}

func containsMonotonic(t time.Time) bool {
	s := t.String()
	for i := 0; i+2 < len(s); i++ {
		if s[i:i+3] == "m=+" {
			return true
		}
	}
	return false
}

// timerSlack is how late a Go timer may fire on a loaded 2-core machine
// under -race; Done must close by Until + timerSlack.
const timerSlack = 50 * time.Millisecond

// countingHook counts what a client sends: single commands and pipelines,
// each one round trip, the commands inside pipelines, and script calls
// (EVAL/EVALSHA) sent on their own and inside pipelines.
type countingHook struct{ single, scripts, pipelines, piped, pipedScripts atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.single.Add(1)
		if isScript(cmd) {
			h.scripts.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipelines.Add(1)
		h.piped.Add(int64(len(cmds)))
		for _, cmd := range cmds {
			if isScript(cmd) {
				h.pipedScripts.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// isScript says whether cmd is a script call (EVAL or EVALSHA).
func isScript(cmd redis.Cmder) bool { n := cmd.Name(); return n == "evalsha" || n == "eval" }

// waitDone waits for l's Done, failing the test after within.
func waitDone(t *testing.T, l *Lock, within time.Duration) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(within):
		t.Fatalf("Done of %q not closed within %v", l.Name(), within)
	}
}

// requireLoss checks that err is a loss for reason and for no other one.
func requireLoss(t *testing.T, err error, reason LossReason) *LostError {
	t.Helper()
	require.ErrorIs(t, err, ErrLost)
	require.ErrorIs(t, err, reason)
	var le *LostError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, reason, le.Reason, "LostError.Reason of %v", err)
	for r := LossExpired; r <= LossMaxHold; r++ {
		if r != reason {
			assert.NotErrorIs(t, err, r)
		}
	}
	return le
}

// twoLockers returns two Lockers on srv, each with a client of its own, as
// two processes would have.
func twoLockers(t *testing.T, srv *redistest.Server, opts ...Option) [2]*Locker {
	return [2]*Locker{newLocker(t, srv.Client(t), opts...), newLocker(t, srv.Client(t), opts...)}
}

// waitSubscribers waits until n connections listen on channel: a waiter whose
// SUBSCRIBE the server has not seen yet would miss a release sent now.
func waitSubscribers(t *testing.T, srv *redistest.Server, channel string, n int64) {
	t.Helper()
	cl := srv.Client(t)
	require.True(t, eventually(5*time.Second, func() bool {
		return cl.PubSubNumSub(context.Background(), channel).Val()[channel] >= n
	}), "%d subscribers on %s", n, channel)
}

// hourRetry makes a waiting call sleep until the blocking lease would end
// (long, in these tests) unless a release message wakes it: a call that
// returns in time proves the message.
func hourRetry(int) time.Duration { return time.Hour }

// eventLog is an Observer that keeps every event, in order.
type eventLog struct {
	mu       sync.Mutex
	acquires []AcquireEvent
	renews   []RenewEvent
	releases []ReleaseEvent
	losses   []LossEvent
	nodes    []NodeErrorEvent
	seq      []string // "acquire:<name>:<outcome>", "renew:<name>:ok|err", "release:<name>", "loss:<name>:<reason>"
}

func (r *eventLog) OnAcquire(e AcquireEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acquires = append(r.acquires, e)
	r.seq = append(r.seq, fmt.Sprintf("acquire:%s:%s", e.Name, e.Outcome))
}

func (r *eventLog) OnRenew(e RenewEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.renews = append(r.renews, e)
	res := "ok"
	if e.Err != nil {
		res = "err"
	}
	r.seq = append(r.seq, fmt.Sprintf("renew:%s:%s", e.Name, res))
}

func (r *eventLog) OnRelease(e ReleaseEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releases = append(r.releases, e)
	r.seq = append(r.seq, "release:"+e.Name)
}

func (r *eventLog) OnLoss(e LossEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.losses = append(r.losses, e)
	r.seq = append(r.seq, fmt.Sprintf("loss:%s:%s", e.Name, e.Err.Reason.String()))
}

func (r *eventLog) OnNodeError(e NodeErrorEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nodes = append(r.nodes, e)
}

func (r *eventLog) nodeEvents() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.nodes {
		out = append(out, fmt.Sprintf("%s %s %v", e.Name, e.Op, e.Err))
	}
	return out
}

// events returns the sequence recorded for name, consecutive duplicates
// (renewals) collapsed.
func (r *eventLog) events(name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.seq {
		var n string
		for i, part := range splitN(s) {
			if i == 1 {
				n = part
			}
		}
		if n != name || (len(out) > 0 && out[len(out)-1] == s) {
			continue
		}
		out = append(out, s)
	}
	return out
}

func splitN(s string) []string {
	var parts []string
	start := 0
	for i := range len(s) {
		if s[i] == ':' {
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// rlNode is one master of a test Redlock on a real redis-server.
type rlNode struct {
	srv    *redistest.Server
	proxy  *redistest.Proxy // nil when the Redlock talks to srv directly
	admin  *redis.Client    // direct to srv, for assertions and skew
	client *redis.Client    // what the Redlock uses: through proxy when there is one
}

// startRLNodes starts n redis-servers. With proxied, the Redlock's clients
// go through a fault proxy per node. readTimeout is the go-redis read
// timeout of the Redlock's clients: how long a call to a paused or
// blackholed node stays in flight (the library gives up on it at the node
// timeout, go-redis only at this one).
func startRLNodes(t *testing.T, n int, proxied bool, readTimeout time.Duration) []*rlNode {
	t.Helper()
	nodes := make([]*rlNode, n)
	for i, srv := range redistest.StartN(t, n) {
		nd := &rlNode{srv: srv, admin: srv.Client(t)}
		addr := srv.Addr()
		if proxied {
			nd.proxy = redistest.NewProxy(t, addr)
			addr = nd.proxy.Addr()
		}
		nd.client = redis.NewClient(&redis.Options{
			Addr:         addr,
			DialTimeout:  time.Second,
			ReadTimeout:  readTimeout,
			WriteTimeout: time.Second,
			MaxRetries:   -1, // a hidden retry could run a script twice
		})
		t.Cleanup(func() { nd.client.Close() })
		nodes[i] = nd
	}
	return nodes
}

// newRL returns a Redlock over nodes, closed when the test ends. The
// proxies are closed before it, so that calls stuck on a blackholed node
// end at once instead of at the client's read timeout.
func newRL(t *testing.T, nodes []*rlNode, opts ...Option) *Redlock {
	t.Helper()
	clients := make([]Client, len(nodes))
	for i, nd := range nodes {
		clients[i] = nd.client
	}
	r, err := NewRedlock(clients, opts...)
	if err != nil {
		t.Fatalf("NewRedlock() = %v", err)
	}
	t.Cleanup(func() { r.Close() })
	t.Cleanup(func() {
		for _, nd := range nodes {
			if nd.proxy != nil {
				nd.proxy.Close()
			}
		}
	})
	return r
}

// warmUp takes and releases a lock on every node, so that connections are
// open and the scripts cached before anything is measured or broken.
func warmUp(t *testing.T, r *Redlock) {
	t.Helper()
	ctx := context.Background()
	// A name per round: an Unlock returns at a quorum, and a straggler's
	// late grant on the name could still refuse the next round there.
	for i := range 3 {
		l, err := r.TryLock(ctx, "warm-up-"+strconv.Itoa(i), WithAutoRenew(false))
		if err != nil {
			t.Fatalf("warm-up TryLock() = %v", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("warm-up Unlock() = %v", err)
		}
	}
}

func rlKey(name string) string { return "{redlock:" + name + "}" }

// holding returns the indices, among idx, of the nodes where the lock key
// of name exists (whoever owns it).
func holding(t *testing.T, nodes []*rlNode, name string, idx ...int) []int {
	t.Helper()
	var out []int
	for _, i := range idx {
		if get(t, nodes[i].admin, rlKey(name)) != "" {
			out = append(out, i)
		}
	}
	return out
}

// ownedBy counts the nodes among idx whose lock key holds owner.
func ownedBy(t *testing.T, nodes []*rlNode, name, owner string, idx ...int) int {
	t.Helper()
	n := 0
	for _, i := range idx {
		if get(t, nodes[i].admin, rlKey(name)) == owner {
			n++
		}
	}
	return n
}

// nodeErrors collects every NodeError in err's tree by node index. errors.As
// finds only the first; a Redlock error joins one per failed node.
func nodeErrors(err error) map[int]*NodeError {
	out := make(map[int]*NodeError)
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case *NodeError:
			out[e.Node] = e
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return out
}

func pause(t *testing.T, nodes []*rlNode, idx ...int) (resume func()) {
	t.Helper()
	for _, i := range idx {
		nodes[i].srv.Pause(t)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, i := range idx {
				nodes[i].srv.Resume(t)
			}
		})
	}
}

// httpAddr serves HTTP on a loopback port: a port that is not Redis.
func httpAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// closedAddr is a loopback port nobody listens on.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// queuedWriters is how many waiting writers the queue key holds: its
// members "o:<id>", scored below zero (_lib.lua).
func queuedWriters(cl redis.Cmdable, key string) (int64, error) {
	return cl.ZCount(context.Background(), key, "-inf", "(0").Result()
}

// allStacks is the stack of every goroutine (runtime.Stack), in a buffer
// grown until it holds them all: a full run leaves many goroutines.
func allStacks() string {
	buf := make([]byte, 1<<16)
	for range 10 { // 64 KiB to 32 MiB
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
	return string(buf)
}
