package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/internal/scripts"
)

// watcher collects what an Observe channel sends, with when it arrived.
type watcher struct {
	mu     sync.Mutex
	got    []Leader
	at     []time.Time
	closed chan struct{}
}

func watch(ch <-chan Leader) *watcher {
	w := &watcher{closed: make(chan struct{})}
	go func() {
		defer close(w.closed)
		for l := range ch {
			w.mu.Lock()
			w.got = append(w.got, l)
			w.at = append(w.at, time.Now())
			w.mu.Unlock()
		}
	}()
	return w
}

// leaders is what w received so far.
func (w *watcher) leaders() []Leader {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.got)
}

// terms is the sequence of non-zero terms w received.
func (w *watcher) terms() []int64 {
	var out []int64
	for _, l := range w.leaders() {
		if l.Term != 0 {
			out = append(out, l.Term)
		}
	}
	return out
}

// next waits for the n-th message (from 0) that matches want and returns
// it with when it arrived.
func (w *watcher) next(t *testing.T, from int, within time.Duration, want func(Leader) bool) (int, Leader, time.Time) {
	t.Helper()
	var (
		idx = -1
		l   Leader
		at  time.Time
	)
	ok := eventually(within, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for i := from; i < len(w.got); i++ {
			if want(w.got[i]) {
				idx, l, at = i, w.got[i], w.at[i]
				return true
			}
		}
		return false
	})
	require.True(t, ok, "no matching Leader from Observe within %v; got %+v", within, w.leaders())
	return idx, l, at
}

// waitClosed waits for the Observe channel to close.
func (w *watcher) waitClosed(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-w.closed:
	case <-time.After(within):
		t.Fatalf("Observe channel not closed within %v", within)
	}
}

// subscribedObserver waits until an observer listens on name's election
// channel on srv (n subscribers in all).
func subscribedObserver(t *testing.T, srv *redistest.Server, name string, n int64) {
	t.Helper()
	waitSubscribers(t, srv, rlKey(name)+electionSuffix, n)
}

// quantile is the q-quantile of ds (sorted in place).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[int(float64(len(ds)-1)*q)]
}

// rounds runs candidates, each an Election of its own Locker or Redlock,
// campaigning until at least n leaderships were won, each leader leading
// for hold and then resigning. It returns the terms in the order they were
// won and the takeover latencies: from the resigning leader's Unlock call
// to the next Campaign's return.
func rounds(t *testing.T, rec *recorder, es []*Election, n int, hold time.Duration) (terms []int64, takeovers []time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		mu       sync.Mutex
		resigned time.Time
		wg       sync.WaitGroup
		errs     = make(chan error, len(es))
	)
	for i, e := range es {
		wg.Go(func() {
			for range 4 * n { // bounded: n rounds in all, shared by the candidates
				l, err := e.Campaign(ctx, fmt.Sprintf("candidate-%d", i))
				at := time.Now()
				if err != nil {
					if ctx.Err() == nil || !errors.Is(err, ErrNotObtained) {
						errs <- fmt.Errorf("candidate %d: Campaign() = %w", i, err)
					}
					return
				}
				a := rec.acquired(l, at)
				mu.Lock()
				if !resigned.IsZero() {
					takeovers = append(takeovers, at.Sub(resigned))
				}
				terms = append(terms, l.Token())
				last := len(terms) >= n
				mu.Unlock()
				// Lead: do the job until it is time to hand over, or stop at
				// once if leadership is lost.
				select {
				case <-l.Done():
				case <-time.After(hold):
				}
				if last {
					cancel() // the others stop campaigning first
				}
				mu.Lock()
				resigned = time.Now()
				mu.Unlock()
				if err := rec.unlock(context.Background(), a, l); err != nil {
					errs <- fmt.Errorf("candidate %d: Unlock() = %w", i, err)
				}
				if last {
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(terms), slices.Clone(takeovers)
}

// TestElectionFiveCandidates: five candidates on one server, each with its
// own client and Locker, take turns: no two leaderships overlap, terms
// strictly increase, the next leader follows a resignation at once, and an
// observer sees every leader in order.
func TestElectionFiveCandidates(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rec := newRecorder(t)
	const name = "election-five"

	octx, ocancel := context.WithCancel(context.Background())
	defer ocancel()
	w := watch(newLocker(t, srv.Client(t)).Election(name).Observe(octx))
	subscribedObserver(t, srv, name, 1)

	var es []*Election
	for range 5 {
		es = append(es, newLocker(t, srv.Client(t), WithTTL(2*time.Second)).Election(name))
	}
	terms, takeovers := rounds(t, rec, es, 15, 20*time.Millisecond)
	rec.checked.Store(true)
	require.NoError(t, rec.Err(), "history")
	require.GreaterOrEqual(t, len(terms), 15)
	for i := 1; i < len(terms); i++ {
		require.Greater(t, terms[i], terms[i-1], "terms %v", terms)
	}

	// Liveness under load: generous bounds; the figures are logged.
	p50, p100 := quantile(takeovers, 0.5), quantile(takeovers, 1)
	t.Logf("takeover after resignation (%d): p50 %v, max %v", len(takeovers), p50, p100)
	assert.Less(t, p50, 200*time.Millisecond, "median takeover after resignation")
	assert.Less(t, p100, 2*time.Second, "slowest takeover after resignation")

	// The observer heard every leader, in order.
	last := terms[len(terms)-1]
	w.next(t, 0, 5*time.Second, func(l Leader) bool { return l.Term == last })
	assert.Equal(t, terms, w.terms(), "terms seen by Observe")
	ocancel()
	w.waitClosed(t, 5*time.Second)
}

// TestElectionLeaderCutOff: a leader cut off from Redis (a partition, or a
// process frozen or killed) loses leadership by its own clock (Done), and
// only after that is the next one elected, within about a TTL of the cut.
func TestElectionLeaderCutOff(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rec := newRecorder(t)
	const name = "election-cutoff"
	const ttl = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	octx, ocancel := context.WithCancel(context.Background())
	defer ocancel()
	w := watch(newLocker(t, srv.Client(t)).Election(name).Observe(octx))
	subscribedObserver(t, srv, name, 1)

	proxy := redistest.NewProxy(t, srv.Addr())
	leaderCl := redis.NewClient(&redis.Options{Addr: proxy.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { leaderCl.Close() })
	first, err := newLocker(t, leaderCl, WithTTL(ttl)).Election(name).Campaign(ctx, "first")
	require.NoError(t, err)
	rec.acquired(first, time.Now())

	type win struct {
		l  *Lock
		at time.Time
	}
	wins := make(chan win, 4)
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	var wg sync.WaitGroup
	for i := range 4 {
		e := newLocker(t, srv.Client(t), WithTTL(ttl)).Election(name)
		wg.Go(func() {
			l, err := e.Campaign(cctx, fmt.Sprintf("next-%d", i))
			if err == nil {
				wins <- win{l, time.Now()}
			}
		})
	}
	writersQueued(t, srv, name, 4)

	cut := time.Now()
	proxy.Blackhole(true)
	var next win
	select {
	case next = <-wins:
	case <-time.After(ttl + 5*time.Second):
		t.Fatalf("no new leader within %v of the cut", ttl+5*time.Second)
	}
	ccancel()
	wg.Wait()
	close(wins)
	rec.acquired(next.l, next.at)
	for extra := range wins { // none expected: the history check would say
		rec.acquired(extra.l, extra.at)
		_ = extra.l.Unlock(context.Background())
	}

	require.ErrorIs(t, first.Err(), ErrLost)
	require.False(t, doneAt(first).IsZero())
	assert.True(t, doneAt(first).Before(next.at), "old leader's Done closed %v, new leader elected %v", doneAt(first), next.at)
	assert.Greater(t, next.l.Token(), first.Token())
	takeover := next.at.Sub(cut)
	t.Logf("takeover after cut-off: %v (TTL %v); old leader's Done closed %v after the cut", takeover, ttl, doneAt(first).Sub(cut))
	assert.Less(t, takeover, ttl+1500*time.Millisecond, "takeover after cut-off")

	// The observer said the old leader was gone when its lease ended, then
	// the new one.
	_, l, seen := w.next(t, 0, 5*time.Second, func(l Leader) bool { return l.Term == next.l.Token() })
	assert.Equal(t, next.l.Metadata(), l.Value)
	t.Logf("observer heard the new leader %v after it was elected", seen.Sub(next.at))
	assert.Equal(t, []int64{first.Token(), next.l.Token()}, w.terms())

	require.NoError(t, next.l.Unlock(context.Background()))
	proxy.Blackhole(false)
	ocancel()
	w.waitClosed(t, 5*time.Second)
}

// TestElectionObserve: one observer hears a new leader, a changed value, a
// resignation, the next leader, and says it does not know while its own
// connection is down; then it closes with its ctx.
func TestElectionObserve(t *testing.T) {
	srv := redistest.Start(t)
	const name = "election-observe"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	proxy := redistest.NewProxy(t, srv.Addr())
	obsCl := redis.NewClient(&redis.Options{Addr: proxy.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { obsCl.Close() })
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	w := watch(newLocker(t, obsCl).Election(name).Observe(octx))
	subscribedObserver(t, srv, name, 1)

	ea := newLocker(t, srv.Client(t)).Election(name)
	eb := newLocker(t, srv.Client(t)).Election(name)
	var lat []time.Duration

	a, err := ea.Campaign(ctx, "a:1")
	require.NoError(t, err)
	won := time.Now()
	i, l, at := w.next(t, 0, 5*time.Second, func(l Leader) bool { return l.Term != 0 })
	lat = append(lat, at.Sub(won))
	assert.Equal(t, Leader{Value: "a:1", Term: a.Token(), TTL: l.TTL}, l)
	assert.Greater(t, l.TTL, time.Duration(0))

	sent := time.Now()
	require.NoError(t, ea.Proclaim(ctx, a, "a:2"))
	i, l, at = w.next(t, i+1, 5*time.Second, func(Leader) bool { return true })
	lat = append(lat, at.Sub(sent))
	assert.Equal(t, "a:2", l.Value)
	assert.Equal(t, a.Token(), l.Term, "Proclaim keeps the term")
	got, err := eb.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "a:2", got.Value)

	sent = time.Now()
	require.NoError(t, a.Unlock(ctx))
	i, l, at = w.next(t, i+1, 5*time.Second, func(Leader) bool { return true })
	lat = append(lat, at.Sub(sent))
	assert.Equal(t, Leader{}, l, "resignation")

	b, err := eb.Campaign(ctx, "b")
	require.NoError(t, err)
	won = time.Now()
	i, l, at = w.next(t, i+1, 5*time.Second, func(Leader) bool { return true })
	lat = append(lat, at.Sub(won))
	assert.Equal(t, "b", l.Value)
	assert.Greater(t, l.Term, a.Token())
	t.Logf("observe latency (leader, proclaim, resign, leader): %v", lat)
	for _, d := range lat {
		assert.Less(t, d, time.Second, "observe latency")
	}

	// The observer's own connection breaks: it cannot tell, then it can.
	proxy.Cut()
	i, l, _ = w.next(t, i+1, 5*time.Second, func(Leader) bool { return true })
	assert.Equal(t, int64(0), l.Term, "cut off: unknown")
	_, l, _ = w.next(t, i+1, 10*time.Second, func(Leader) bool { return true })
	assert.Equal(t, b.Token(), l.Term, "reconnected: the leader again")

	ocancel()
	w.waitClosed(t, 5*time.Second)
	require.NoError(t, b.Unlock(ctx))
}

// TestElectionLeaderExpiry: a leader that vanishes without a word (kill -9,
// here a partition that stops its renewals) is reported gone by the
// observer when its lease ends on the server: a timer armed from the lease
// it last read, not polling.
func TestElectionLeaderExpiry(t *testing.T) {
	srv := redistest.Start(t)
	const name = "election-expiry"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	w := watch(newLocker(t, srv.Client(t)).Election(name).Observe(octx))
	subscribedObserver(t, srv, name, 1)

	proxy := redistest.NewProxy(t, srv.Addr())
	cl := redis.NewClient(&redis.Options{Addr: proxy.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { cl.Close() })
	l, err := newLocker(t, cl, WithTTL(time.Second)).Election(name).Campaign(ctx, "doomed")
	require.NoError(t, err)
	i, _, _ := w.next(t, 0, 5*time.Second, func(l Leader) bool { return l.Term != 0 })
	proxy.Blackhole(true)
	pttl, _ := srv.Do(t, "PTTL", rlKey(name)).(int64)
	expires := time.Now().Add(time.Duration(pttl) * time.Millisecond)
	_, got, at := w.next(t, i+1, 5*time.Second, func(Leader) bool { return true })
	assert.Equal(t, Leader{}, got)
	t.Logf("observer reported the vanished leader %v after its lease ended on the server", at.Sub(expires))
	assert.Less(t, at.Sub(expires), time.Second)
	waitDone(t, l, 5*time.Second)
	proxy.Blackhole(false)
	ocancel()
	w.waitClosed(t, 5*time.Second)
}

// TestElectionLeader: Leader, Proclaim and the errors of bad input.
func TestElectionLeader(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lk := newLocker(t, srv.Client(t), WithTTL(5*time.Second))
	e := lk.Election("election-leader")

	_, err := e.Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader)
	assert.Equal(t, `redlock: election "election-leader": no leader`, err.Error())

	l, err := e.Campaign(ctx, "host-a:8080")
	require.NoError(t, err)
	got, err := e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "host-a:8080", got.Value)
	assert.Equal(t, l.Token(), got.Term)
	assert.Greater(t, got.TTL, 4*time.Second)
	h, err := lk.Inspect(ctx, "election-leader")
	require.NoError(t, err)
	assert.Equal(t, "host-a:8080", h.Metadata, "the value is the lock's metadata")

	require.NoError(t, e.Proclaim(ctx, l, "host-a:9090"))
	got, err = e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, Leader{Value: "host-a:9090", Term: l.Token(), TTL: got.TTL}, got)
	// A renewal keeps the proclaimed value.
	require.NoError(t, l.Extend(ctx, 5*time.Second))
	got, err = e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "host-a:9090", got.Value)

	// Bad input: errors, never a panic.
	require.Error(t, e.Proclaim(ctx, nil, "x"))
	other, err := lk.TryLock(ctx, "election-other")
	require.NoError(t, err)
	err = e.Proclaim(ctx, other, "x")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a leader of election")
	require.NoError(t, other.Unlock(ctx))
	otherLocker := newLocker(t, srv.Client(t))
	require.Error(t, otherLocker.Election("election-leader").Proclaim(ctx, l, "x"), "a lock of another Locker")

	require.NoError(t, l.Unlock(ctx))
	require.ErrorIs(t, e.Proclaim(ctx, l, "late"), ErrNotHeld, "a resigned leader")
	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader)

	// An empty value: a leader, with nothing to change.
	l, err = e.Campaign(ctx, "")
	require.NoError(t, err)
	got, err = e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, Leader{Term: l.Token(), TTL: got.TTL}, got)
	require.Error(t, e.Proclaim(ctx, l, "x"))
	require.NoError(t, e.Proclaim(ctx, l, ""))
	require.NoError(t, l.Unlock(ctx))

	for _, bad := range []*Election{lk.Election(""), (*Locker)(nil).Election("x"), (*Redlock)(nil).Election("x"), nil} {
		_, err := bad.Campaign(ctx, "v")
		require.Error(t, err)
		_, err = bad.Leader(ctx)
		require.Error(t, err)
		require.Error(t, bad.Proclaim(ctx, l, "v"))
		_, open := <-bad.Observe(ctx)
		require.False(t, open, "Observe of an unusable Election is closed")
	}
	_, err = lk.Election("").Leader(ctx)
	assert.Equal(t, "redlock: empty election name", err.Error())
}

// TestElectionObserveClose: Close of the Locker ends its observers.
func TestElectionObserveClose(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk, err := NewLocker(srv.Client(t))
	require.NoError(t, err)
	w := watch(lk.Election("election-close").Observe(context.Background()))
	subscribedObserver(t, srv, "election-close", 1)
	require.NoError(t, lk.Close())
	w.waitClosed(t, 5*time.Second)
	_, open := <-lk.Election("election-close").Observe(context.Background())
	assert.False(t, open, "Observe after Close")
}

// TestElectionRedlockPausedMaster: the same election over three masters,
// each candidate with its own Redlock and clients, while one master is
// paused (SIGSTOP).
func TestElectionRedlockPausedMaster(t *testing.T) {
	t.Parallel()
	nodes := startRLNodes(t, 3, false, time.Second)
	rec := newRecorder(t)
	const name = "election-redlock"
	redlockOf := func() *Redlock {
		t.Helper()
		clients := make([]Client, len(nodes))
		for i, nd := range nodes {
			cl := redis.NewClient(&redis.Options{Addr: nd.srv.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1})
			t.Cleanup(func() { cl.Close() })
			clients[i] = cl
		}
		r, err := NewRedlock(clients, WithTTL(2*time.Second))
		require.NoError(t, err)
		t.Cleanup(func() { r.Close() })
		warmUp(t, r)
		return r
	}
	octx, ocancel := context.WithCancel(context.Background())
	defer ocancel()
	w := watch(redlockOf().Election(name).Observe(octx))
	for _, nd := range nodes {
		subscribedObserver(t, nd.srv, name, 1)
	}
	var es []*Election
	for range 5 {
		es = append(es, redlockOf().Election(name))
	}
	resume := pause(t, nodes, 2)
	t.Cleanup(resume) // before the Redlocks close

	terms, takeovers := rounds(t, rec, es, 10, 20*time.Millisecond)
	rec.checked.Store(true)
	require.NoError(t, rec.Err(), "history")
	for i := 1; i < len(terms); i++ {
		require.Greater(t, terms[i], terms[i-1], "terms %v", terms)
	}
	inOrder := slices.Clone(takeovers)
	p50, p100 := quantile(takeovers, 0.5), quantile(takeovers, 1)
	t.Logf("Redlock, one master paused: takeover after resignation (%d): p50 %v, max %v; in order %v", len(takeovers), p50, p100, inOrder)
	assert.Less(t, p50, 500*time.Millisecond, "median takeover after resignation")
	// Liveness only: a waiter of a Redlock whose pub/sub cannot reach every
	// master may poll up to a lease (see the README); bounded generously.
	assert.Less(t, p100, 10*time.Second, "slowest takeover after resignation")

	last := terms[len(terms)-1]
	w.next(t, 0, 10*time.Second, func(l Leader) bool { return l.Term == last })
	assert.Equal(t, terms, w.terms(), "terms seen by Observe")
	resume()
	ocancel()
	w.waitClosed(t, 5*time.Second)
}

// TestElectionCampaignForcesFencingAndRenewal: Campaign's lock is "always
// with fencing (its Token is the term) and auto-renewal, whatever the
// options say" (Election.Campaign's doc, election.go). Options that turn
// both off, on the Locker, on the Election or on a Redlock, still give a
// term >= 1 and a leader that stays elected, on the server too, for more
// than three TTLs; a plain lock with the same options has neither, so the
// options are in force.
func TestElectionCampaignForcesFencingAndRenewal(t *testing.T) {
	t.Parallel()
	// 800ms: a renewal every 267ms, each retried when it fails, so a
	// starved machine cannot make the lease run out; short enough that
	// three leases pass in under 3s.
	const ttl = 800 * time.Millisecond
	off := []Option{WithFencing(false), WithAutoRenew(false)}
	cases := []struct {
		name string
		// election returns the Election under test, the options its plain
		// lock gets, and the nodes' clients, to read the key.
		election func(t *testing.T, name string) (*Election, func(context.Context, string) (*Lock, error), []*redis.Client)
	}{
		{"Locker options", func(t *testing.T, name string) (*Election, func(context.Context, string) (*Lock, error), []*redis.Client) {
			srv := redistest.Start(t)
			lk := newLocker(t, srv.Client(t), append([]Option{WithTTL(ttl)}, off...)...)
			plain := func(ctx context.Context, n string) (*Lock, error) { return lk.TryLock(ctx, n) }
			return lk.Election(name), plain, []*redis.Client{srv.Client(t)}
		}},
		{"Election options", func(t *testing.T, name string) (*Election, func(context.Context, string) (*Lock, error), []*redis.Client) {
			srv := redistest.Start(t)
			lk := newLocker(t, srv.Client(t), WithTTL(ttl))
			plain := func(ctx context.Context, n string) (*Lock, error) { return lk.TryLock(ctx, n, off...) }
			return lk.Election(name, off...), plain, []*redis.Client{srv.Client(t)}
		}},
		{"Redlock", func(t *testing.T, name string) (*Election, func(context.Context, string) (*Lock, error), []*redis.Client) {
			nodes := startRLNodes(t, 3, false, time.Second)
			r := newRL(t, nodes, append([]Option{WithTTL(ttl)}, off...)...)
			var admins []*redis.Client
			for _, nd := range nodes {
				admins = append(admins, nd.admin)
			}
			plain := func(ctx context.Context, n string) (*Lock, error) { return r.TryLock(ctx, n) }
			return r.Election(name), plain, admins
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const name = "election-forced"
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			e, plain, admins := tc.election(t, name)

			p, err := plain(ctx, name+"-plain")
			require.NoError(t, err, "TryLock() with fencing and renewal off")
			assert.Equal(t, int64(0), p.Token(), "TryLock() Token with WithFencing(false): the option is in force")
			require.NoError(t, p.Unlock(ctx))

			l, err := e.Campaign(ctx, "leader")
			won := time.Now()
			require.NoError(t, err)
			require.GreaterOrEqual(t, l.Token(), int64(1), "Campaign() Token = %d with WithFencing(false), want a term >= 1", l.Token())

			// Renewals move Until on: past won+4*TTL means the leader held
			// through more than three leases. Without renewal Done closes
			// after the first one, and the wait ends there.
			renewed := eventually(6*ttl, func() bool {
				select {
				case <-l.Done():
					return true
				default:
				}
				return l.Until().After(won.Add(4 * ttl))
			})
			require.NoError(t, l.Err(), "Err() of the leader %v after Campaign with WithAutoRenew(false), want nil", time.Since(won))
			select {
			case <-l.Done():
				t.Fatalf("Done() closed %v after Campaign with WithAutoRenew(false), want open", doneAt(l).Sub(won))
			default:
			}
			require.True(t, renewed, "Until() = won + %v after %v, want past won + %v: no renewals", l.Until().Sub(won), time.Since(won), 4*ttl)

			// On the server too: every node's key still holds the leader.
			for i, cl := range admins {
				assert.Equal(t, l.Owner(), get(t, cl, rlKey(name)), "node %d: lock key %v after Campaign", i, time.Since(won))
				pttl, err := cl.PTTL(ctx, rlKey(name)).Result()
				require.NoError(t, err)
				assert.Greater(t, pttl, time.Duration(0), "node %d: PTTL of the leader's key", i)
			}
			got, err := e.Leader(ctx)
			require.NoError(t, err, "Leader()")
			assert.Equal(t, l.Token(), got.Term, "Leader().Term")
			assert.Equal(t, "leader", got.Value, "Leader().Value")
			t.Logf("term %d; held %v after Campaign (TTL %v), Until won + %v", l.Token(), time.Since(won), ttl, l.Until().Sub(won))
			require.NoError(t, l.Unlock(ctx))
		})
	}
}

// TestElectionCloseResigns: Close of the leader's Locker resigns
// (Election.Campaign's doc, election.go: "Close of the Locker resigns
// too"), and the candidate waiting on another Locker leads at once
// (docs/election.md, Takeover: "after a resignation (Unlock, or Close on
// shutdown) the next candidate leads within milliseconds"). The TTL is 30s
// and the bound 5s: only the resignation explains the takeover.
func TestElectionCloseResigns(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const name = "election-close-resigns"
	const ttl = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lkA := newLocker(t, srv.Client(t), WithTTL(ttl))
	lkB := newLocker(t, srv.Client(t), WithTTL(ttl))

	a, err := lkA.Election(name).Campaign(ctx, "a")
	require.NoError(t, err)
	type win struct {
		l   *Lock
		err error
		at  time.Time
	}
	won := make(chan win, 1)
	eb := lkB.Election(name)
	go func() {
		l, err := eb.Campaign(ctx, "b")
		won <- win{l, err, time.Now()}
	}()
	writersQueued(t, srv, name, 1) // b waits behind a

	closed := time.Now()
	require.NoError(t, lkA.Close())
	select {
	case <-a.Done():
	default:
		t.Fatal("Done() of the leader open after Close of its Locker, want closed")
	}
	require.ErrorIs(t, a.Err(), ErrClosed, "Err() of the leader after Close")

	var b win
	select {
	case b = <-won:
	case <-time.After(5 * time.Second):
		t.Fatalf("no new leader within 5s of Close (TTL %v): Close did not resign", ttl)
	}
	require.NoError(t, b.err, "Campaign() of the waiting candidate")
	took := b.at.Sub(closed)
	t.Logf("takeover after Close of the leader's Locker: %v (TTL %v)", took, ttl)
	assert.Less(t, took, 2*time.Second, "takeover after Close")
	assert.Greater(t, b.l.Token(), a.Token(), "the new term")
	assert.Equal(t, b.l.Owner(), get(t, srv.Client(t), rlKey(name)), "lock key after the takeover")
	got, err := eb.Leader(ctx)
	require.NoError(t, err, "Leader()")
	assert.Equal(t, Leader{Value: "b", Term: b.l.Token(), TTL: got.TTL}, got)
	require.NoError(t, b.l.Unlock(ctx))
}

// TestElectionLeaderReservedIsNoLeader: the leader resigns while a
// candidate waits, so the release reserves the name for that candidate
// ("queued:<id>"); until the candidate takes it, Leader says ErrNoLeader
// (errors.go, ErrNoLeader: "or a release has just reserved it for a
// waiting candidate"), not a leader with no value. The candidate is cut
// off (its link blackholed) so that it cannot take the name during the
// check, and the reservation lasts the releaser's node timeout (5s);
// reading the key before and after Leader shows the reservation spanned
// the call.
func TestElectionLeaderReservedIsNoLeader(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	const name = "election-reserved"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	lkA := newLocker(t, srv.Client(t), WithTTL(30*time.Second), WithNodeTimeout(5*time.Second))
	a, err := lkA.Election(name).Campaign(ctx, "a")
	require.NoError(t, err)

	proxy := redistest.NewProxy(t, srv.Addr())
	clB := redis.NewClient(&redis.Options{Addr: proxy.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { clB.Close() })
	lkB := newLocker(t, clB, WithTTL(30*time.Second))
	type win struct {
		l   *Lock
		err error
	}
	won := make(chan win, 1)
	go func() {
		l, err := lkB.Election(name).Campaign(ctx, "b")
		won <- win{l, err}
	}()
	writersQueued(t, srv, name, 1) // b waits behind a

	proxy.Blackhole(true)
	require.NoError(t, a.Unlock(ctx), "Unlock() of the leader")
	before := get(t, admin, rlKey(name))
	require.Contains(t, before, scripts.ReservedPrefix, "lock key after the leader resigned with a candidate queued")

	_, err = newLocker(t, srv.Client(t)).Election(name).Leader(ctx)
	after := get(t, admin, rlKey(name))
	require.Equal(t, before, after, "lock key after Leader(): the reservation must span the call")
	require.ErrorIs(t, err, ErrNoLeader, "Leader() while the name is reserved for a candidate")

	// The candidate, reconnected, takes the name.
	proxy.Blackhole(false)
	var b win
	select {
	case b = <-won:
	case <-time.After(10 * time.Second):
		t.Fatal("the reserved candidate did not lead within 10s of reconnecting")
	}
	require.NoError(t, b.err, "Campaign() of the reserved candidate")
	assert.Greater(t, b.l.Token(), a.Token(), "the new term")
	require.NoError(t, b.l.Unlock(ctx))
}
