package node

import (
	"context"
	"errors"
	"strconv"
	"sync"
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

// pipelineHook records the size of every pipeline the client sends, and
// refuses them with refuse when it is set.
type pipelineHook struct {
	mu     sync.Mutex
	sizes  []int
	refuse error
}

func (h *pipelineHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.sizes = append(h.sizes, len(cmds))
		refuse := h.refuse
		h.mu.Unlock()
		if refuse != nil {
			return refuse
		}
		return next(ctx, cmds)
	}
}

func (h *pipelineHook) seen() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.sizes...)
}

// combined returns a BoundedClient (node timeout 5s) of a client of addr,
// and the pipelines its client sent. wait is turnWaitMin for the test
// (restored when it ends): a long one lets the test hold calls in the
// queue for as long as it needs.
func combined(t *testing.T, addr string, wait time.Duration) (*BoundedClient, *pipelineHook) {
	t.Helper()
	return combinedOn(t, &redis.Options{Addr: addr, MaxRetries: -1}, wait)
}

// combinedOn is combined for a client made with opt.
func combinedOn(t *testing.T, opt *redis.Options, wait time.Duration) (*BoundedClient, *pipelineHook) {
	t.Helper()
	old := turnWaitMin
	turnWaitMin = wait
	t.Cleanup(func() { turnWaitMin = old })
	cl := redis.NewClient(opt)
	t.Cleanup(func() { _ = cl.Close() })
	h := &pipelineHook{}
	cl.AddHook(h)
	return DivertedOf(cl).bounded(5 * time.Second), h
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

// pauseWrites pauses the server's writes (CLIENT PAUSE WRITE) until
// unpause, or the end of the test. A script flagged no-writes still runs.
func pauseWrites(t *testing.T, srv *redistest.Server) (unpause func()) {
	t.Helper()
	srv.Do(t, "CLIENT", "PAUSE", "60000", "WRITE")
	unpause = func() { srv.Do(t, "CLIENT", "UNPAUSE") }
	t.Cleanup(unpause)
	return unpause
}

// onWire sends n scripts of b, the i-th with keys and args of its own
// from call(i), and returns once they are on the wire with those already
// there; the channel closes once they have answered.
func onWire(t *testing.T, b *BoundedClient, n int, call func(i int) (script string, keys []string, args []any)) (answered <-chan struct{}) {
	t.Helper()
	before, _ := b.comb.state()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			script, keys, args := call(i)
			assert.NoError(t, b.Eval(context.Background(), script, keys, args...).Err(), "script %d on the wire", i)
		})
	}
	until(t, "the scripts on the wire", func() bool { s, _ := b.comb.state(); return s == before+n })
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

// holdWire pauses the server's writes and puts n writes of b on the wire,
// held there until unpause; the channel closes once they have answered.
func holdWire(t *testing.T, b *BoundedClient, srv *redistest.Server, n int) (unpause func(), answered <-chan struct{}) {
	t.Helper()
	unpause = pauseWrites(t, srv)
	return unpause, heldWrites(t, b, n)
}

// heldWrites puts n writes of b on the wire, which a pause holds there.
func heldWrites(t *testing.T, b *BoundedClient, n int) (answered <-chan struct{}) {
	t.Helper()
	return onWire(t, b, n, func(i int) (string, []string, []any) {
		return "return redis.call('SET', KEYS[1], 'x')", []string{"held-" + strconv.Itoa(i)}, nil
	})
}

// busyOnWire puts n scripts of b on the wire that each hold the server for
// d, one after the other, also while its writes are paused; the channel
// closes once they have answered.
func busyOnWire(t *testing.T, b *BoundedClient, n int, d time.Duration) (answered <-chan struct{}) {
	t.Helper()
	return onWire(t, b, n, func(int) (string, []string, []any) {
		return "#!lua flags=no-writes\n" + busy, nil, []any{d.Microseconds()}
	})
}

// queue starts f, a call that finds the wire full, and returns once it
// waits for its turn (the n-th to wait).
func queue(t *testing.T, b *BoundedClient, n int, f func()) {
	t.Helper()
	go f()
	until(t, "call "+strconv.Itoa(n)+" waiting for its turn", func() bool { _, w := b.comb.state(); return w == n })
}

// queueCalls queues n calls, call(0) to call(n-1), one after the other
// (see queue), and returns a function that waits for all of them.
func queueCalls(t *testing.T, b *BoundedClient, n int, call func(i int)) (wait func()) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		queue(t, b, i+1, func() {
			defer wg.Done()
			call(i)
		})
	}
	return wg.Wait
}

// Calls that overlap sendingMax calls on the wire wait for one of them to
// answer, go out together as one pipeline, and each gets its own reply.
func TestCombinedCallsKeepTheirReplies(t *testing.T) {
	srv := redistest.Start(t)
	b, h := combined(t, srv.Addr(), time.Minute)
	unpause, held := holdWire(t, b, srv, sendingMax)
	const n = 10
	got := make([]any, n)
	wait := queueCalls(t, b, n, func(i int) {
		var err error
		got[i], err = b.Eval(context.Background(), "return ARGV[1]", nil, "reply-"+strconv.Itoa(i)).Result()
		assert.NoError(t, err, "call %d", i)
	})
	unpause()
	wait()
	<-held
	for i, v := range got {
		assert.Equal(t, "reply-"+strconv.Itoa(i), v, "call %d's reply", i)
	}
	assert.Equal(t, []int{n}, h.seen(), "pipelines sent")
	s, w := b.comb.state()
	assert.Equal(t, [2]int{0, 0}, [2]int{s, w}, "calls on the wire and waiting afterwards")
}

// A call whose ctx ends (cancelled or past its deadline) while it waits for
// its turn returns the ctx's error at once and is never sent; the call
// that waited after it goes out alone when its turn comes.
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
			srv := redistest.Start(t)
			b, h := combined(t, srv.Addr(), time.Minute)
			unpause, held := holdWire(t, b, srv, sendingMax)
			ctx, cancel, end := tc.ctx()
			defer cancel()
			errc := make(chan error, 1)
			queue(t, b, 1, func() { errc <- b.Eval(ctx, "return redis.call('SET', KEYS[1], 'sent')", []string{"never"}).Err() })
			live := make(chan any, 1)
			queue(t, b, 2, func() { live <- b.Eval(context.Background(), "return ARGV[1]", nil, "live").Val() })
			end()
			select {
			case err := <-errc:
				assert.ErrorIs(t, err, tc.want, "Eval() of the ended call, while the wire is held")
			case <-time.After(10 * time.Second):
				t.Fatal("the ended call did not return while the wire was held")
			}
			unpause()
			<-held
			assert.Equal(t, "live", <-live, "the call queued after it")
			assert.Nil(t, srv.Do(t, "GET", "never"), "the ended call's write")
			assert.Empty(t, h.seen(), "pipelines sent: the live call went alone")
			s, w := b.comb.state()
			assert.Equal(t, [2]int{0, 0}, [2]int{s, w}, "calls on the wire and waiting afterwards")
		})
	}
}

// A call whose batch is on the wire returns when its ctx ends, its outcome
// unknown (the script still runs). The batch is led by the call whose
// deadline is latest, not by the first to queue, and the others get their
// replies when it answers.
func TestCallInABatchEndsByItsOwnCtx(t *testing.T) {
	srv := redistest.Start(t)
	b, h := combined(t, srv.Addr(), time.Minute)
	unpause := pauseWrites(t, srv) // first: the server answers nothing during the busy script
	// One call on the wire answers (a script flagged no-writes runs during
	// the pause) after 2s: time for the test to queue two calls behind it.
	first := busyOnWire(t, b, 1, 2*time.Second)
	writes := heldWrites(t, b, sendingMax-1)
	defer func() { <-writes }()
	short, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shortErr := make(chan error, 1)
	queue(t, b, 1, func() { shortErr <- b.Eval(short, "return redis.call('SET', KEYS[1], 'ran')", []string{"short"}).Err() })
	longCtx, cancelLong := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancelLong()
	long := make(chan any, 1)
	queue(t, b, 2, func() { long <- b.Eval(longCtx, "return ARGV[1]", nil, "long").Val() })
	<-first
	until(t, "the batch sent", func() bool { return len(h.seen()) == 1 })
	cancel()
	select {
	case err := <-shortErr:
		assert.ErrorIs(t, err, context.Canceled, "Eval() of the short call, its batch held")
	case <-time.After(10 * time.Second):
		t.Fatal("the short call did not return while its batch was held")
	}
	unpause()
	assert.Equal(t, "long", <-long, "the long call's reply")
	assert.Equal(t, "ran", srv.Do(t, "GET", "short"), "the short call's script ran")
	assert.Equal(t, []int{2}, h.seen(), "pipelines sent")
}

// A call that finds the calls on the wire held up waits no longer than
// its turn's bound, then goes alone: a script the server may run (flagged
// no-writes, during CLIENT PAUSE WRITE) answers while the writes ahead of
// it wait out the pause. A call sent as EVAL_RO never waits for a turn.
func TestHeldUpWireCallsGoAlone(t *testing.T) {
	srv := redistest.Start(t)
	b, h := combined(t, srv.Addr(), turnWaitMin)
	unpause, held := holdWire(t, b, srv, sendingMax)
	v, err := b.Eval(context.Background(), "#!lua flags=no-writes\nreturn 'read'", nil).Result()
	require.NoError(t, err)
	assert.Equal(t, "read", v, "no-writes script")
	turnWaitMin = time.Minute // a call sent as EVAL_RO waits for no turn at all
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	v, err = b.EvalRO(ctx, "return 'ro'", nil).Result()
	require.NoError(t, err)
	assert.Equal(t, "ro", v, "EVAL_RO")
	select {
	case <-held:
		t.Fatal("the held writes answered during the pause")
	default:
	}
	unpause()
	<-held
	assert.Empty(t, h.seen(), "pipelines sent")
}

// A server farther away than the shortest turn (a round trip of 20ms or
// more, behind a delaying proxy) still gets batches: a call waits for its
// turn three round trips, but no more than a tenth of its node timeout.
func TestTurnWaitFollowsTheRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	p := redistest.NewProxy(t, srv.Addr())
	p.SetDelay(10 * time.Millisecond)
	b, h := combined(t, p.Addr(), turnWaitMin)
	for i := range 5 {
		require.NoError(t, b.Eval(context.Background(), "return 1", nil).Err(), "call %d alone", i)
	}
	assert.GreaterOrEqual(t, b.comb.turnWait(), 60*time.Millisecond, "turn's bound after round trips of 20ms or more")
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 5 {
				want := strconv.Itoa(g) + "-" + strconv.Itoa(i)
				v, err := b.Eval(context.Background(), "return ARGV[1]", nil, want).Result()
				if !assert.NoError(t, err) || !assert.Equal(t, want, v) {
					return
				}
			}
		})
	}
	wg.Wait()
	assert.NotEmpty(t, h.seen(), "pipelines sent by 16 callers 20ms away")
	// The bound leaves a call most of its node timeout, however slow the
	// round trips.
	short := &combiner{timeout: 100 * time.Millisecond}
	short.took(20 * time.Millisecond)
	assert.Equal(t, 10*time.Millisecond, short.turnWait(), "turn's bound for a node timeout of 100ms")
}

// A batch whose connection breaks after the server ran it is not sent
// again, although the client retries single commands (MaxRetries 3): a
// pipeline's retry would run again the scripts whose replies were read.
// Each call gets the error; each script ran once.
func TestBatchNotRetried(t *testing.T) {
	srv := redistest.Start(t)
	p := redistest.NewProxy(t, srv.Addr())
	b, h := combinedOn(t, &redis.Options{Addr: p.Addr(), MaxRetries: 3}, time.Minute)
	// The batch's connection made first: its set-up's replies, which a
	// busy server would hold back, must not be the ones dropped.
	_, err := b.comb.batches.Pipelined(context.Background(), func(p redis.Pipeliner) error { return p.Ping(context.Background()).Err() })
	require.NoError(t, err, "a pipeline on the batches' connection")
	unpause := pauseWrites(t, srv)
	// The wire full of scripts the pause lets run, one after the other: a
	// second for the test to queue two calls behind the first.
	busyDone := busyOnWire(t, b, sendingMax, time.Second)
	errs := make([]error, 2)
	wait := queueCalls(t, b, 2, func(i int) {
		errs[i] = b.Eval(context.Background(), "return redis.call('INCR', KEYS[1])", []string{"runs"}).Err()
	})
	<-busyDone // the batch went out after the first, and waits out the pause
	require.Equal(t, []int{2}, h.seen(), "pipelines sent through the hooks")
	p.DropReplies(1)
	unpause()
	wait()
	for i, err := range errs {
		assert.Error(t, err, "call %d of the batch whose replies were lost", i)
	}
	assert.Equal(t, "2", srv.Do(t, "GET", "runs"), "runs of the batch's two scripts")
}

// An error that ends a whole batch before any reply (here a hook's) is the
// error of each of its calls.
func TestBatchErrorReachesEveryCall(t *testing.T) {
	srv := redistest.Start(t)
	b, h := combined(t, srv.Addr(), time.Minute)
	refused := errors.New("hook refused the pipeline")
	h.mu.Lock()
	h.refuse = refused
	h.mu.Unlock()
	unpause, held := holdWire(t, b, srv, sendingMax)
	const n = 3
	errs := make([]error, n)
	wait := queueCalls(t, b, n, func(i int) {
		errs[i] = b.Eval(context.Background(), "return ARGV[1]", nil, "x").Err()
	})
	unpause()
	wait()
	<-held
	for i, err := range errs {
		assert.ErrorIs(t, err, refused, "call %d of the refused batch", i)
	}
	assert.Equal(t, []int{n}, h.seen(), "pipelines sent")
}

// Many callers at once: calls go out together, every call gets its own
// reply, and the combiner ends with nothing on the wire and nothing
// waiting.
func TestCombinedCallsMany(t *testing.T) {
	srv := redistest.Start(t)
	b, h := combined(t, srv.Addr(), turnWaitMin)
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
	assert.NotEmpty(t, h.seen(), "pipelines sent by 32 callers")
	t.Logf("%d of %d calls went in %d pipelines", batched, callers*calls, len(h.seen()))
}
