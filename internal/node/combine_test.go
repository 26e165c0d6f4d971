package node

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redlockgo/redlock/internal/redistest"
)

func TestMain(m *testing.M) {
	redistest.QuietGoRedis()
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// busy holds the server for ARGV[1] µs of its own clock: the calls sent
// after it wait, whatever the machine's load.
const busy = `local t = redis.call('TIME')
local stop = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
repeat t = redis.call('TIME') until tonumber(t[1]) * 1000000 + tonumber(t[2]) >= stop
return 'busy'`

// pipelineHook records the size of every pipeline the client sends.
type pipelineHook struct {
	mu    sync.Mutex
	sizes []int
}

func (h *pipelineHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.sizes = append(h.sizes, len(cmds))
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (h *pipelineHook) seen() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.sizes...)
}

// combined returns a BoundedClient of a fresh server (node timeout 5s),
// the server, and the pipelines its client sent. wait is turnWait for the
// test (restored when it ends): a long one lets the test hold calls in
// the queue for as long as it needs.
func combined(t *testing.T, wait time.Duration) (*BoundedClient, *redistest.Server, *pipelineHook) {
	t.Helper()
	old := turnWait
	turnWait = wait
	t.Cleanup(func() { turnWait = old })
	srv := redistest.Start(t)
	cl := srv.Client(t)
	h := &pipelineHook{}
	cl.AddHook(h)
	return DivertedOf(cl).bounded(5 * time.Second), srv, h
}

// state is the combiner's count of calls on the wire and of calls waiting.
func (c *combiner) state() (sending, waiting int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sending, len(c.waiting)
}

// until polls cond every millisecond for up to 10s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 10000 {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("not within 10s: %s", what)
}

// hold sends n busy scripts of d each and returns once they are the calls
// on the wire; the channel closes when all have answered.
func hold(t *testing.T, b *BoundedClient, n int, d time.Duration) <-chan struct{} {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			assert.NoError(t, b.Eval(context.Background(), busy, nil, d.Microseconds()).Err(), "busy script")
		})
	}
	until(t, "the busy scripts on the wire", func() bool { s, _ := b.comb.state(); return s == n })
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

// Calls that overlap two calls on the wire wait for one of them to answer,
// go out together as one pipeline, and each gets its own reply.
func TestCombinedCallsKeepTheirReplies(t *testing.T) {
	b, _, h := combined(t, time.Minute)
	held := hold(t, b, sendingMax, 150*time.Millisecond)
	const n = 10
	got := make([]any, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var err error
			got[i], err = b.Eval(context.Background(), "return ARGV[1]", nil, "reply-"+strconv.Itoa(i)).Result()
			assert.NoError(t, err, "call %d", i)
		})
	}
	until(t, "the calls queued", func() bool { _, w := b.comb.state(); return w == n })
	wg.Wait()
	<-held
	for i, v := range got {
		assert.Equal(t, "reply-"+strconv.Itoa(i), v, "call %d's reply", i)
	}
	assert.Equal(t, []int{n}, h.seen(), "pipelines sent")
	s, w := b.comb.state()
	assert.Equal(t, [2]int{0, 0}, [2]int{s, w}, "calls on the wire and waiting afterwards")
}

// A call whose ctx ends (cancelled or past its deadline) while it waits for
// its turn returns the ctx's error at once and is never sent; the calls
// after it go on.
func TestCallEndedWhileWaitingIsNeverSent(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc, func())
		want error
	}{
		{"cancelled", func() (context.Context, context.CancelFunc, func()) {
			ctx, cancel := context.WithCancel(context.Background())
			return ctx, cancel, cancel
		}, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc, func()) {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			return ctx, cancel, func() {}
		}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, srv, _ := combined(t, time.Minute)
			held := hold(t, b, sendingMax, 250*time.Millisecond)
			ctx, cancel, end := tc.ctx()
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- b.Eval(ctx, "return redis.call('SET', KEYS[1], 'sent')", []string{"never"}).Err() }()
			until(t, "the call queued", func() bool { _, w := b.comb.state(); return w == 1 })
			end()
			select {
			case err := <-errc:
				assert.ErrorIs(t, err, tc.want, "Eval() of the ended call")
			case <-held:
				t.Fatal("the ended call returned only after the calls on the wire answered")
			}
			<-held
			assert.Equal(t, "after", b.Eval(context.Background(), "return ARGV[1]", nil, "after").Val(), "a call after it")
			assert.Nil(t, srv.Do(t, "GET", "never"), "the ended call's write")
			s, w := b.comb.state()
			assert.Equal(t, [2]int{0, 0}, [2]int{s, w}, "calls on the wire and waiting afterwards")
		})
	}
}

// A call whose batch is on the wire returns when its ctx ends, its outcome
// unknown (the script still runs); the batch is led by the call whose
// deadline is latest (here the one without any), whatever the order they
// queued in, and the others get their replies when it answers.
func TestCallInABatchEndsByItsOwnCtx(t *testing.T) {
	b, srv, h := combined(t, time.Minute)
	// The writes wait out the pause; the scripts flagged no-writes run.
	srv.Do(t, "CLIENT", "PAUSE", "2000", "WRITE")
	first := make(chan struct{})
	go func() {
		defer close(first)
		assert.NoError(t, b.Eval(context.Background(), "#!lua flags=no-writes\n"+busy, nil, (200*time.Millisecond).Microseconds()).Err(), "busy script")
	}()
	var writes sync.WaitGroup
	for i := range sendingMax - 1 {
		writes.Go(func() {
			assert.NoError(t, b.Eval(context.Background(), "return redis.call('SET', KEYS[1], 'x')", []string{"paused-" + strconv.Itoa(i)}).Err(), "paused write")
		})
	}
	paused := make(chan struct{})
	go func() { writes.Wait(); close(paused) }()
	until(t, "the calls on the wire", func() bool { s, _ := b.comb.state(); return s == sendingMax })
	short, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shortErr := make(chan error, 1)
	go func() { shortErr <- b.Eval(short, "return redis.call('SET', KEYS[1], 'ran')", []string{"short"}).Err() }()
	until(t, "the short call queued", func() bool { _, w := b.comb.state(); return w == 1 })
	long := make(chan any, 1)
	go func() { long <- b.Eval(context.Background(), "return ARGV[1]", nil, "long").Val() }()
	until(t, "both queued", func() bool { _, w := b.comb.state(); return w == 2 })
	<-first
	until(t, "the batch sent", func() bool { return len(h.seen()) == 1 })
	cancel()
	select {
	case err := <-shortErr:
		assert.ErrorIs(t, err, context.Canceled, "Eval() of the short call")
	case <-paused:
		t.Fatal("the short call returned only after its batch could be answered")
	}
	assert.Equal(t, "long", <-long, "the long call's reply")
	<-paused
	assert.Equal(t, "ran", srv.Do(t, "GET", "short"), "the short call's script ran")
	assert.Equal(t, []int{2}, h.seen(), "pipelines sent")
}

// A call that finds the calls on the wire held up waits no longer than
// turnWait, then goes alone: a script the server may run (flagged
// no-writes, during CLIENT PAUSE WRITE) answers while the writes ahead of
// it wait out the pause. A read-only call (EVAL_RO) never waits for a turn.
func TestHeldUpWireCallsGoAlone(t *testing.T) {
	b, srv, h := combined(t, 2*time.Millisecond)
	srv.Do(t, "CLIENT", "PAUSE", "3000", "WRITE")
	var wg sync.WaitGroup
	var writes atomic.Int32
	for i := range sendingMax {
		wg.Go(func() {
			assert.NoError(t, b.Eval(context.Background(), "return redis.call('SET', KEYS[1], 'x')", []string{"paused-" + strconv.Itoa(i)}).Err(), "paused write")
			writes.Add(1)
		})
	}
	defer wg.Wait()
	until(t, "the writes on the wire", func() bool { s, _ := b.comb.state(); return s == sendingMax })
	start := time.Now()
	v, err := b.Eval(context.Background(), "#!lua flags=no-writes\nreturn 'read'", nil).Result()
	require.NoError(t, err)
	assert.Equal(t, "read", v, "no-writes script")
	turnWait = time.Minute // a read-only call waits for no turn at all
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	v, err = b.EvalRO(ctx, "return 'ro'", nil).Result()
	require.NoError(t, err)
	assert.Equal(t, "ro", v, "EVAL_RO")
	assert.Zero(t, writes.Load(), "writes answered during the pause (after %v)", time.Since(start))
	assert.Empty(t, h.seen(), "pipelines sent")
}

// Many callers at once: every call gets its own reply, and the combiner
// ends with nothing on the wire and nothing waiting.
func TestCombinedCallsMany(t *testing.T) {
	b, _, h := combined(t, turnWait)
	const callers, calls = 32, 50
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range calls {
				want := strconv.Itoa(g) + "-" + strconv.Itoa(i)
				v, err := b.Eval(context.Background(), "return ARGV[1]", nil, want).Result()
				if !assert.NoError(t, err) || !assert.Equal(t, want, v) {
					return
				}
			}
		})
	}
	wg.Wait()
	s, w := b.comb.state()
	assert.Equal(t, [2]int{0, 0}, [2]int{s, w}, "calls on the wire and waiting afterwards")
	batched := 0
	for _, n := range h.seen() {
		batched += n
	}
	t.Logf("%d of %d calls went in %d pipelines", batched, callers*calls, len(h.seen()))
}
