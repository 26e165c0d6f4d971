package redlock

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/redistest"
)

// The promises of the lock that the docs make, each checked against real
// servers with go-redis clients at their defaults (no ContextTimeoutEnabled,
// 3s read timeout, dial and command retries on): the configuration a user
// starts with, and the one whose calls run inline on a clone (client.go).
// SAFETY.md's promise table lists these tests with the others.

// goRedisDefaults is a go-redis client at its defaults to addr, closed when
// the test ends.
func goRedisDefaults(t testing.TB, addr string) *redis.Client {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { cl.Close() })
	return cl
}

// acquirePath is one way of acquiring, run by a Locker (or Redlock) whose
// replies are slow, and probe, which takes the same name from another
// Locker (or Redlock) once it is free.
type acquirePath struct {
	name    string
	redlock bool
	acquire func(ctx context.Context, lk lockMaker) error
	probe   func(ctx context.Context, lk lockMaker) error
}

// lockMaker is what the paths need of a Locker or a Redlock.
type lockMaker interface {
	TryLock(ctx context.Context, name string, opts ...Option) (*Lock, error)
	Lock(ctx context.Context, name string, opts ...Option) (*Lock, error)
	Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error
	Election(name string, opts ...Option) *Election
}

// tryAndDrop takes name with TryLock and releases it.
func tryAndDrop(name string) func(ctx context.Context, lk lockMaker) error {
	return func(ctx context.Context, lk lockMaker) error {
		l, err := lk.TryLock(ctx, name)
		if err != nil {
			return err
		}
		return l.Unlock(ctx)
	}
}

// noLeader probes that election name has no leader: a Campaign whose ctx
// had ended must not have left one.
func noLeader(name string) func(ctx context.Context, lk lockMaker) error {
	return func(ctx context.Context, lk lockMaker) error {
		_, err := lk.Election(name).Leader(ctx)
		if errors.Is(err, ErrNoLeader) {
			return nil
		}
		if err == nil {
			return errors.New("a leader whose Campaign's ctx had ended")
		}
		return err
	}
}

func keep(l *Lock, err error) error {
	if err == nil {
		_ = l.Unlock(context.Background())
		return errors.New("got a lock from a call whose ctx had ended")
	}
	return err
}

var acquirePaths = []acquirePath{
	{name: "TryLock", acquire: func(ctx context.Context, lk lockMaker) error { return keep(lk.TryLock(ctx, "p-try")) }, probe: tryAndDrop("p-try")},
	{name: "Lock", acquire: func(ctx context.Context, lk lockMaker) error { return keep(lk.Lock(ctx, "p-lock")) }, probe: tryAndDrop("p-lock")},
	{name: "Do", acquire: func(ctx context.Context, lk lockMaker) error {
		ran := false
		err := lk.Do(ctx, "p-do", func(context.Context) error { ran = true; return nil })
		if ran {
			return errors.New("Do ran fn for a call whose ctx had ended")
		}
		return err
	}, probe: tryAndDrop("p-do")},
	{name: "LockAll", acquire: func(ctx context.Context, lk lockMaker) error {
		return keep(lk.(*Locker).LockAll(ctx, []string{"p-all-1", "p-all-2"}))
	}, probe: func(ctx context.Context, lk lockMaker) error {
		l, err := lk.(*Locker).TryLockAll(ctx, []string{"p-all-1", "p-all-2"})
		if err != nil {
			return err
		}
		return l.Unlock(ctx)
	}},
	{name: "RLock", acquire: func(ctx context.Context, lk lockMaker) error { return keep(lk.(*Locker).RLock(ctx, "p-read")) }, probe: tryAndDrop("p-read")},
	{name: "Semaphore", acquire: func(ctx context.Context, lk lockMaker) error {
		s, err := lk.(*Locker).Semaphore("p-sem", 1)
		if err != nil {
			return err
		}
		return keep(s.Acquire(ctx))
	}, probe: func(ctx context.Context, lk lockMaker) error {
		s, err := lk.(*Locker).Semaphore("p-sem", 1)
		if err != nil {
			return err
		}
		l, err := s.TryAcquire(ctx)
		if err != nil {
			return err
		}
		return l.Unlock(ctx)
	}},
	{name: "Campaign", acquire: func(ctx context.Context, lk lockMaker) error {
		return keep(lk.Election("p-elect").Campaign(ctx, "late"))
	}, probe: noLeader("p-elect")},
	{name: "Redlock", redlock: true, acquire: func(ctx context.Context, lk lockMaker) error { return keep(lk.TryLock(ctx, "p-redlock")) }, probe: tryAndDrop("p-redlock")},
	{name: "Redlock.Lock", redlock: true, acquire: func(ctx context.Context, lk lockMaker) error { return keep(lk.Lock(ctx, "p-redlock-lock")) }, probe: tryAndDrop("p-redlock-lock")},
	{name: "Redlock.Do", redlock: true, acquire: func(ctx context.Context, lk lockMaker) error {
		ran := false
		err := lk.Do(ctx, "p-redlock-do", func(context.Context) error { ran = true; return nil })
		if ran {
			return errors.New("Do ran fn for a call whose ctx had ended")
		}
		return err
	}, probe: tryAndDrop("p-redlock-do")},
	{name: "Redlock.Campaign", redlock: true, acquire: func(ctx context.Context, lk lockMaker) error {
		return keep(lk.Election("p-redlock-elect").Campaign(ctx, "late"))
	}, probe: noLeader("p-redlock-elect")},
}

// TestPromiseCancelledCallReturnsAtOnce: a call whose ctx ends while its
// reply is on the wire returns then, with an error matching ErrNotObtained
// and the ctx's error, on every acquire path; the grant that arrives later
// is released at once, so another Locker takes the name long before the
// lease would end. Replies are 400ms late; the ctx ends at 150ms.
func TestPromiseCancelledCallReturnsAtOnce(t *testing.T) {
	const delay, cancelAt = 400 * time.Millisecond, 150 * time.Millisecond
	for _, p := range acquirePaths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			n := 1
			if p.redlock {
				n = 3
			}
			slow, direct := make([]Client, n), make([]Client, n)
			proxies := make([]*redistest.Proxy, n)
			for i, srv := range redistest.StartN(t, n) {
				proxies[i] = redistest.NewProxy(t, srv.Addr())
				slow[i], direct[i] = goRedisDefaults(t, proxies[i].Addr()), goRedisDefaults(t, srv.Addr())
			}
			opts := []Option{WithTTL(10 * time.Second), WithNodeTimeout(2 * time.Second)}
			var lk, other lockMaker
			if p.redlock {
				a, err := NewRedlock(slow, opts...)
				require.NoError(t, err)
				t.Cleanup(func() { a.Close() })
				b, err := NewRedlock(direct, opts...)
				require.NoError(t, err)
				t.Cleanup(func() { b.Close() })
				lk, other = a, b
			} else {
				lk, other = newLocker(t, slow[0], opts...), newLocker(t, direct[0], opts...)
			}
			for _, px := range proxies {
				px.SetDelay(delay)
			}
			ctx, cancel := context.WithCancel(context.Background())
			stop := time.AfterFunc(cancelAt, cancel)
			defer stop.Stop()
			start := time.Now()
			err := p.acquire(ctx, lk)
			took := time.Since(start)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrNotObtained)
			assert.ErrorIs(t, err, context.Canceled)
			// No reply can come before delay: returning earlier proves the
			// call did not wait for it.
			assert.Less(t, took, delay, "%s returned %v after its call began, want at the ctx's end (%v)", p.name, took, cancelAt)
			// The grant ran on the server and its reply comes at delay; its
			// release is sent then. Another Locker takes the name within a
			// few round trips of that, not at the lease's end (10s).
			probe, cancelProbe := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancelProbe()
			var last error
			freed := eventuallyEvery(4*time.Second, 20*time.Millisecond, func() bool {
				last = p.probe(probe, other)
				return last == nil
			})
			assert.True(t, freed, "the late grant was not released: another Locker still refused 4s on (%v)", last)
		})
	}
}

// TestPromiseUnlockDuringWritePause: an Unlock that a server paused for
// writes cannot answer within the node timeout reports that, and the lock
// ends (Done, ErrReleased); the release is sent again until the server
// runs it, so the key goes right after the pause, not at the lease's end.
// The same for Close.
func TestPromiseUnlockDuringWritePause(t *testing.T) {
	for _, how := range []string{"Unlock", "Close"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			const ttl, pause = 8 * time.Second, 2 * time.Second
			lk := newLocker(t, goRedisDefaults(t, srv.Addr()), WithTTL(ttl), WithNodeTimeout(800*time.Millisecond))
			ctx := context.Background()
			l, err := lk.TryLock(ctx, "p-pause")
			require.NoError(t, err)
			key := l.Key()
			srv.Do(t, "CLIENT", "PAUSE", pause.Milliseconds(), "WRITE")
			start := time.Now()
			if how == "Unlock" {
				assert.Error(t, l.Unlock(ctx), "Unlock during a write pause")
			} else {
				require.NoError(t, lk.Close())
			}
			select {
			case <-l.Done():
			default:
				t.Fatal("Done still open after the release")
			}
			assert.ErrorIs(t, l.Err(), ErrReleased)
			// EXISTS is a read: the pause lets it through.
			gone := eventuallyEvery(ttl-time.Since(start)-time.Second, 50*time.Millisecond, func() bool {
				return srv.Do(t, "EXISTS", key) == int64(0)
			})
			require.True(t, gone, "the key is still there %v after %s, its lease ends at %v", time.Since(start), how, ttl)
			assert.GreaterOrEqual(t, time.Since(start), pause-100*time.Millisecond, "the key went before the pause ended: it was not paused")
		})
	}
}

// TestPromiseRefusedNodeNamesItsCause: a node whose port refuses
// connections fails an acquisition within the node timeout with an error
// that names the refusal (syscall.ECONNREFUSED in the chain), and never
// with the library's own deadline dressed as the caller's
// (context.DeadlineExceeded), whatever ctx the caller passes.
func TestPromiseRefusedNodeNamesItsCause(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	const nodeTimeout = time.Second
	lk := newLocker(t, goRedisDefaults(t, addr), WithNodeTimeout(nodeTimeout))
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{{"background", context.Background()}, {"cancellable", cancellable}} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			l, err := lk.TryLock(c.ctx, "p-refused")
			took := time.Since(start)
			require.Error(t, err)
			assert.Nil(t, l)
			assert.ErrorIs(t, err, ErrNotObtained)
			assert.ErrorIs(t, err, syscall.ECONNREFUSED, "TryLock() = %v, want the refusal named", err)
			assert.NotErrorIs(t, err, context.DeadlineExceeded, "TryLock() = %v: the caller's ctx has no deadline", err)
			assert.Less(t, took, nodeTimeout+time.Second, "TryLock took %v, node timeout %v", took, nodeTimeout)
		})
	}
}

// TestPromiseNoRetryNamesLocalHolder: a single-attempt Lock or Do on a name
// that another goroutine of the same Locker holds says who holds it (a
// *TakenError with the holder's owner value), as it does when another
// process holds it.
func TestPromiseNoRetryNamesLocalHolder(t *testing.T) {
	srv := redistest.Start(t)
	cl := goRedisDefaults(t, srv.Addr())
	lk, other := newLocker(t, cl), newLocker(t, cl)
	ctx := context.Background()
	held, err := lk.TryLock(ctx, "w3")
	require.NoError(t, err)
	defer held.Unlock(ctx)
	for _, c := range []struct {
		name string
		lk   *Locker
	}{{"same Locker", lk}, {"other Locker", other}} {
		t.Run(c.name, func(t *testing.T) {
			_, lockErr := c.lk.Lock(ctx, "w3", WithRetry(NoRetry()))
			doErr := c.lk.Do(ctx, "w3", func(context.Context) error { return nil }, WithRetry(NoRetry()))
			for _, err := range []error{lockErr, doErr} {
				var te *TakenError
				require.ErrorAs(t, err, &te, "error %v", err)
				assert.ErrorIs(t, err, ErrNotObtained)
				assert.Equal(t, held.Owner(), te.Owner, "TakenError.Owner")
				assert.Positive(t, te.TTL, "TakenError.TTL")
			}
		})
	}
}

// TestPromiseTable keeps PROMISES.md true to the suite: every test it names
// is a test of this package or of one under internal/, and its closing
// command runs exactly those, in the packages that hold them.
func TestPromiseTable(t *testing.T) {
	doc, err := os.ReadFile("PROMISES.md")
	require.NoError(t, err)
	text := string(doc)
	cmdAt := strings.LastIndex(text, "go test -race -count=1 -run '^(")
	require.Positive(t, cmdAt, "PROMISES.md has no closing command")
	tables, command := text[:cmdAt], text[cmdAt:]

	fset := token.NewFileSet()
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	for _, dir := range []string{"internal/*", "redlocktest"} {
		more, err := filepath.Glob(dir + "/*_test.go")
		require.NoError(t, err)
		files = append(files, more...)
	}
	tests := map[string]string{} // test -> the package's directory, as go test names it
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range file.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
				tests[fn.Name.Name] = "./" + filepath.Dir(f)
			}
		}
	}

	// The Test column: the last cell of each row, up to the list of
	// promises that have none.
	if i := strings.Index(tables, "## Promises without a test yet"); i >= 0 {
		tables = tables[:i]
	}
	named := map[string]bool{}
	pkgs := map[string]bool{}
	testName := regexp.MustCompile("`(Test[A-Za-z0-9_]+)(/[^`]*)?`")
	for line := range strings.Lines(tables) {
		cells := strings.Split(strings.TrimSpace(line), "|")
		if len(cells) < 3 || !strings.HasPrefix(line, "|") {
			continue
		}
		for _, m := range testName.FindAllStringSubmatch(cells[len(cells)-2], -1) {
			named[m[1]] = true
			pkgs[strings.TrimSuffix(tests[m[1]], "/.")] = true
			assert.NotEmpty(t, tests[m[1]], "PROMISES.md names %s, which is not a test of this package or of internal/", m[1])
		}
	}
	require.NotEmpty(t, named)
	m := regexp.MustCompile(`-run '\^\(([^)]*)\)\$'`).FindStringSubmatch(command)
	require.Len(t, m, 2, "closing command")
	run := map[string]bool{}
	for _, name := range strings.Split(m[1], "|") {
		run[name] = true
	}
	assert.Equal(t, named, run, "the closing command must run exactly the tests the table names")
	args := map[string]bool{}
	for _, a := range strings.Fields(command[strings.Index(command, ")$'")+3:]) {
		if a == "```" {
			break
		}
		args[a] = true
	}
	assert.Equal(t, pkgs, args, "the closing command must name the packages of those tests")
}

// TestPromiseUnansweredLimitOff: WithUnansweredLimit(0) turns the limit
// off, and a Lock then waits until its ctx ends (options.go,
// WithUnansweredLimit): on a server that answers nothing (paused with
// SIGSTOP), a Lock with the limit off returns only when its 1.5s ctx ends,
// with an error matching ErrNotObtained and the ctx's error, not
// ErrUnreachable. The limit off is checked given to the constructor and
// given per call over a constructor's 200ms; the same Locker's call without
// the option gives up on that 200ms limit (ErrUnreachable) while its ctx
// has 10s left: the server does not answer, and only the limit being off
// keeps the other calls waiting. (That call decides at about 300ms, and
// returns after the one diagnosing call the library then makes, up to 2s.
// The default limit, 10s, would cost more than this test's budget to
// watch run out.)
func TestPromiseUnansweredLimitOff(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const limit, wait = 200 * time.Millisecond, 1500 * time.Millisecond
	locker := func(opts ...Option) *Locker {
		// Socket timeouts short, so that the calls the paused server leaves
		// hanging end soon; one dial per connection, so that no go-redis
		// dial retry outlives the test.
		cl := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: 250 * time.Millisecond, DialerRetries: 1,
			ReadTimeout: 250 * time.Millisecond, WriteTimeout: 250 * time.Millisecond, MaxRetries: -1})
		t.Cleanup(func() { cl.Close() })
		lk := newLocker(t, cl, append([]Option{WithNodeTimeout(100 * time.Millisecond)}, opts...)...)
		// Connected, scripts loaded: what follows is the pause, not a cold start.
		l, err := lk.TryLock(context.Background(), "p-unanswered-warm", WithAutoRenew(false))
		require.NoError(t, err)
		require.NoError(t, l.Unlock(context.Background()))
		return lk
	}
	limited, off := locker(WithUnansweredLimit(limit)), locker(WithUnansweredLimit(0))
	type result struct {
		err, ctxErr error
		took        time.Duration
	}
	lock := func(lk *Locker, d time.Duration, name string, opts ...Option) <-chan result {
		got := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			start := time.Now()
			l, err := lk.Lock(ctx, name, opts...)
			if err == nil {
				_ = l.Unlock(context.Background())
			}
			got <- result{err, ctx.Err(), time.Since(start)}
		}()
		return got
	}
	srv.Pause(t)
	t.Cleanup(func() { srv.Resume(t) })
	calls := []struct {
		name string
		got  <-chan result
	}{
		{"constructor 0", lock(off, wait, "p-unanswered-off")},
		{"per call 0 over 200ms", lock(limited, wait, "p-unanswered-call", WithUnansweredLimit(0))},
	}
	gaveUp := lock(limited, 10*time.Second, "p-unanswered-limited")

	r := <-gaveUp
	t.Logf("limit %v: returned after %v: %v", limit, r.took, r.err)
	require.ErrorIs(t, r.err, ErrNotObtained, "Lock() with a %v limit", limit)
	require.ErrorIs(t, r.err, ErrUnreachable, "Lock() = %v, want it to give up after %v unanswered", r.err, limit)
	require.NoError(t, r.ctxErr, "the call with a %v limit gave up only when its ctx ended", limit)
	for _, c := range calls {
		r := <-c.got
		t.Logf("%s: returned after %v: %v", c.name, r.took, r.err)
		require.Error(t, r.ctxErr, "%s: Lock() = %v after %v, before its ctx ended (%v)", c.name, r.err, r.took, wait)
		assert.ErrorIs(t, r.err, ErrNotObtained, "%s: Lock()", c.name)
		assert.ErrorIs(t, r.err, context.DeadlineExceeded, "%s: Lock() = %v, want the ctx's error", c.name, r.err)
		assert.NotErrorIs(t, r.err, ErrUnreachable, "%s: Lock() = %v, want no unanswered limit", c.name, r.err)
		assert.Less(t, r.took, wait+time.Second, "%s: Lock() returned %v after its ctx ended at %v", c.name, r.took, wait)
	}
}

// TestPromiseUnansweredDiagnosisEndsWithCtx: a waiting Lock that reaches
// its unanswered limit asks each silent node once more, with a bound of its
// own (2s), why it did not answer. When the call's ctx ends meanwhile (its
// deadline, or a cancel), Lock returns then, with an error matching
// ErrNotObtained and the ctx's error, not when that question times out.
func TestPromiseUnansweredDiagnosisEndsWithCtx(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// One dial per connection, so that no go-redis dial retry outlives the
	// test (as in TestPromiseUnansweredLimitOff).
	cl := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: 250 * time.Millisecond, DialerRetries: 1,
		ReadTimeout: 250 * time.Millisecond, WriteTimeout: 250 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { cl.Close() })
	lk := newLocker(t, cl, WithNodeTimeout(100*time.Millisecond), WithUnansweredLimit(200*time.Millisecond))
	l, err := lk.TryLock(context.Background(), "diagnosis-warm", WithAutoRenew(false))
	require.NoError(t, err)
	require.NoError(t, l.Unlock(context.Background()))
	srv.Pause(t)
	defer srv.Resume(t)
	// The limit is reached at about 300ms (two attempts of 100ms and a
	// sleep), the diagnosis starts then and would run 2s; the ctx ends at
	// 450ms.
	const end = 450 * time.Millisecond
	ends := []struct {
		how  string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) { return context.WithTimeout(context.Background(), end) }, context.DeadlineExceeded},
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			stop := time.AfterFunc(end, cancel)
			return ctx, func() { stop.Stop(); cancel() }
		}, context.Canceled},
	}
	for _, e := range ends {
		ctx, cancel := e.ctx()
		start := time.Now()
		_, err := lk.Lock(ctx, "diagnosis-"+e.how)
		took := time.Since(start)
		cancel()
		require.Error(t, err, "Lock() on a paused server (%s)", e.how)
		assert.ErrorIs(t, err, ErrNotObtained, "Lock() ended by its ctx's %s", e.how)
		assert.ErrorIs(t, err, e.want, "Lock() ended by its ctx's %s: %v after %v", e.how, err, took)
		assert.Less(t, took, end+time.Second, "Lock() returned %v after it began; its ctx ended at %v (%s)", took, end, e.how)
	}
}

// TestPromiseWithdrawalEndsWithCtx: a waiting Lock that gives up on its
// own (its retry policy ran out) leaves the server-side queue before it
// returns; when its ctx ends during that withdrawal (a paused server), it
// returns then, with the ctx's error, and the withdrawal runs on.
func TestPromiseWithdrawalEndsWithCtx(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	holder := newLocker(t, srv.Client(t), WithTTL(30*time.Second))
	ctx := context.Background()
	l, err := holder.TryLock(ctx, "withdraw-paused")
	require.NoError(t, err)
	cl := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: 250 * time.Millisecond, DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { cl.Close() })
	// Attempts 200ms apart, two in all, each bounded by 1s.
	waiter := newLocker(t, cl, WithNodeTimeout(time.Second), WithRetry(LimitRetry(ConstantRetry(200*time.Millisecond), 2)))
	// Refused at once (queued), then the second attempt at 200ms gets no
	// answer until 1.2s; the withdrawal then runs until 2.2s. The ctx ends
	// in between, at 1.6s.
	const end = 1600 * time.Millisecond
	lctx, cancel := context.WithTimeout(ctx, end)
	defer cancel()
	type result struct {
		err  error
		took time.Duration
	}
	got := make(chan result, 1)
	start := time.Now()
	go func() {
		_, err := waiter.Lock(lctx, "withdraw-paused")
		got <- result{err, time.Since(start)}
	}()
	// Queued and listening for the release (a SUBSCRIBE on a paused server
	// would push the second attempt past the ctx's end).
	writersQueued(t, srv, "withdraw-paused", 1)
	channel := engine.ReleaseChannel(engine.LockKey("redlock:", "withdraw-paused"))
	require.True(t, eventually(5*time.Second, func() bool { return waiter.c.Waits.PS.Listening(channel) }), "the waiter listens")
	srv.Pause(t)
	defer srv.Resume(t)
	r := <-got
	require.Error(t, r.err)
	assert.ErrorIs(t, r.err, ErrNotObtained)
	assert.ErrorIs(t, r.err, context.DeadlineExceeded, "Lock() = %v, its ctx ended during the withdrawal", r.err)
	assert.Less(t, r.took, end+300*time.Millisecond, "Lock() returned %v after it began; its ctx ended at %v", r.took, end)
	srv.Resume(t)
	require.NoError(t, l.Unlock(ctx))
}
