package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/internal/scripts"
)

// expiryWatch records the keys a server expires, from its keyspace
// notifications: a key removed by a release is not among them, one left to
// its TTL is. (INFO's expired_keys counter could not tell the lock key from
// the release's own markers, which expire by design.)
type expiryWatch struct {
	admin *redis.Client
	sub   *redis.PubSub
	keys  map[string]bool
}

const flushChannel = "redlock-test:flush"

func watchExpiry(t *testing.T, admin *redis.Client) *expiryWatch {
	t.Helper()
	ctx := context.Background()
	if err := admin.ConfigSet(ctx, "notify-keyspace-events", "Ex").Err(); err != nil {
		t.Fatalf("CONFIG SET notify-keyspace-events = %v", err)
	}
	sub := admin.Subscribe(ctx, "__keyevent@0__:expired", flushChannel)
	t.Cleanup(func() { sub.Close() })
	for range 2 {
		if _, err := sub.ReceiveTimeout(ctx, 5*time.Second); err != nil {
			t.Fatalf("SUBSCRIBE = %v", err)
		}
	}
	return &expiryWatch{admin: admin, sub: sub, keys: map[string]bool{}}
}

// expired reports whether key has expired since the watch began. A message
// published now is delivered after every expiry event the server sent
// before it, so reading up to it reads them all.
func (w *expiryWatch) expired(t *testing.T, key string) bool {
	t.Helper()
	ctx := context.Background()
	mark := strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := w.admin.Publish(ctx, flushChannel, mark).Err(); err != nil {
		t.Fatalf("PUBLISH = %v", err)
	}
	for range 10_000 {
		msg, err := w.sub.ReceiveTimeout(ctx, 5*time.Second)
		if err != nil {
			t.Fatalf("reading expiry events = %v", err)
		}
		m, ok := msg.(*redis.Message)
		switch {
		case !ok:
		case m.Channel == flushChannel && m.Payload == mark:
			return w.keys[key]
		case m.Channel != flushChannel:
			w.keys[m.Payload] = true
		}
	}
	t.Fatalf("flush mark not seen in 10000 messages")
	return false
}

func indices(mask, n int) []int {
	var out []int
	for i := range n {
		if mask&(1<<i) != 0 {
			out = append(out, i)
		}
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func TestNewRedlockGuards(t *testing.T) {
	t.Parallel()
	mk := func() *redis.Client { cl, _ := miniClient(t); return cl }
	a, b, c := mk(), mk(), mk()
	sameAddr := redis.NewClient(&redis.Options{Addr: a.Options().Addr})
	t.Cleanup(func() { sameAddr.Close() })
	// One server under another DB number is the same failure domain.
	otherDB := redis.NewClient(&redis.Options{Addr: a.Options().Addr, DB: 1})
	t.Cleanup(func() { otherDB.Close() })
	var typedNil *redis.Client

	bad := []struct {
		name    string
		clients []Client
		opts    []Option
	}{
		{"nil list", nil, nil},
		{"empty list", []Client{}, nil},
		{"nil client", []Client{a, nil, b}, nil},
		{"typed nil client", []Client{a, b, typedNil}, nil},
		{"same client twice", []Client{a, b, a}, nil},
		{"two clients, same address", []Client{a, b, sameAddr}, nil},
		{"same server, another DB", []Client{a, b, otherDB}, nil},
		{"invalid option", []Client{a, b, c}, []Option{WithTTL(0)}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewRedlock(tt.clients, tt.opts...)
			if err == nil {
				r.Close()
				t.Fatalf("NewRedlock() = nil error, want one")
			}
		})
	}

	t.Run("even N", func(t *testing.T) {
		var clients []Client
		var servers []*miniredis.Miniredis
		for range 4 {
			cl, mr := miniClient(t)
			clients = append(clients, cl)
			servers = append(servers, mr)
		}
		r, err := NewRedlock(clients, WithAutoRenew(false))
		if err != nil {
			t.Fatalf("NewRedlock(4 clients) = %v, want allowed", err)
		}
		t.Cleanup(func() { r.Close() })
		if r.c.Pool.Quorum != 3 {
			t.Errorf("quorum of 4 = %d, want 3", r.c.Pool.Quorum)
		}
		ctx := context.Background()
		servers[0].SetError("ERR down for the test")
		l, err := r.TryLock(ctx, "even")
		if err != nil {
			t.Fatalf("TryLock() with 3 of 4 up = %v, want granted", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock() = %v", err)
		}
		servers[1].SetError("ERR down for the test")
		if _, err := r.TryLock(ctx, "even"); !errors.Is(err, ErrNotObtained) {
			t.Errorf("TryLock() with 2 of 4 up = %v, want ErrNotObtained (quorum 3)", err)
		}
		// The attempt gives up as soon as 2 nodes failed, maybe before the
		// grants of 2 and 3 arrive; those are released when they do.
		for i := 2; i < 4; i++ {
			if !eventually(time.Second, func() bool { return !slices.Contains(servers[i].Keys(), rlKey("even")) }) {
				t.Errorf("node %d keys after the failed attempt = %v, want the lock key released", i, servers[i].Keys())
			}
		}
	})

	t.Run("N=1", func(t *testing.T) {
		r, err := NewRedlock([]Client{a}, WithAutoRenew(false))
		if err != nil {
			t.Fatalf("NewRedlock(1 client) = %v, want allowed", err)
		}
		t.Cleanup(func() { r.Close() })
		if r.c.Pool.Quorum != 1 {
			t.Errorf("quorum of 1 = %d, want 1", r.c.Pool.Quorum)
		}
		ctx := context.Background()
		l, err := r.TryLock(ctx, "single")
		if err != nil {
			t.Fatalf("TryLock() = %v", err)
		}
		if _, err := r.TryLock(ctx, "single"); !errors.Is(err, ErrNotObtained) {
			t.Errorf("second TryLock() = %v, want ErrNotObtained", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock() = %v", err)
		}
	})
}

// TestRedlockQuorumTable: for every subset of 5 nodes that are down (their
// proxy drops everything), an acquisition succeeds iff at least 3 are up. A
// failed one reports ErrNotObtained with a NodeError per down node and
// leaves no key anywhere.
func TestRedlockQuorumTable(t *testing.T) {
	t.Parallel()
	const n, nodeTimeout = 5, 100 * time.Millisecond
	nodes := startRLNodes(t, n, true, 300*time.Millisecond)
	r := newRL(t, nodes, WithNodeTimeout(nodeTimeout), WithAutoRenew(false))
	warmUp(t, r)
	ctx := context.Background()
	all := indices(1<<n-1, n)
	for mask := range 1 << n {
		down := indices(mask, n)
		up := indices(^mask&(1<<n-1), n)
		t.Run(fmt.Sprintf("down=%v", down), func(t *testing.T) {
			for i, nd := range nodes {
				nd.proxy.Blackhole(mask&(1<<i) != 0)
			}
			for try := 1; ; try++ {
				name := fmt.Sprintf("quorum-%05b-%d", mask, try)
				start := time.Now()
				l, err := r.TryLock(ctx, name)
				took := time.Since(start)
				var owned int
				var uerr error
				if err == nil {
					owned = ownedBy(t, nodes, name, l.Owner(), up...)
					uerr = l.Unlock(ctx)
				}
				// An up node that did not answer within the node timeout
				// means the machine stalled (it is shared), not that the
				// library miscounted: such a run proves nothing, so it is
				// repeated. A real defect repeats too.
				if slow := timedOut(errors.Join(err, uerr), up); len(up) >= 3 && len(slow) > 0 && try < 5 {
					t.Logf("try %d: up nodes %v gave no reply within %v; again once they answer a PING", try, slow, nodeTimeout)
					for _, i := range slow {
						pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
						_ = nodes[i].client.Ping(pctx).Err()
						cancel()
					}
					continue
				}
				if len(up) >= 3 {
					if err != nil {
						t.Fatalf("TryLock() with %d up = %v, want granted", len(up), err)
					}
					if owned < 3 {
						t.Errorf("lock key ours on %d up nodes, want >= 3", owned)
					}
					if uerr != nil {
						t.Errorf("Unlock() = %v, want nil", uerr)
					}
				} else {
					if err == nil {
						t.Fatalf("TryLock() with %d up = granted, want ErrNotObtained", len(up))
					}
					if !errors.Is(err, ErrNotObtained) {
						t.Errorf("TryLock() = %v, want ErrNotObtained", err)
					}
					var ne *NodeError
					if !errors.As(err, &ne) {
						t.Errorf("TryLock() = %v, want a NodeError in it", err)
					}
					// A NodeError for each down node whose failure came before
					// the outcome was decided: at least as many as make a
					// quorum impossible (the round ends there, and under load
					// the last down node's timeout may fire just after).
					failed := nodeErrors(err)
					named := 0
					for _, i := range down {
						if failed[i] != nil {
							named++
						}
					}
					if want := min(len(down), len(nodes)-len(nodes)/2); named < want {
						t.Errorf("TryLock() = %v, want a NodeError for %d of the down nodes %v", err, want, down)
					}
				}
				// Nothing of this attempt may stay behind: released on the
				// up nodes, never received by the down ones.
				if !eventually(time.Second, func() bool { return len(holding(t, nodes, name, all...)) == 0 }) {
					t.Errorf("lock key left on nodes %v, want none", holding(t, nodes, name, all...))
				}
				t.Logf("%d up: granted %v in %v", len(up), err == nil, took.Round(time.Millisecond))
				return
			}
		})
	}
	for _, nd := range nodes {
		nd.proxy.Blackhole(false)
	}
}

// TimedOut returns the nodes among idx that err reports as giving no reply
// within the node timeout.
func timedOut(err error, idx []int) []int {
	var out []int
	for i, ne := range nodeErrors(err) {
		if slices.Contains(idx, i) && errors.Is(ne, node.ErrTimeout) {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// TestRedlockTwoPaused: with 2 of 5 masters SIGSTOPped, acquisitions return
// at quorum instead of waiting for the stragglers, and the late grants the
// paused masters make after SIGCONT are released by the library.
func TestRedlockTwoPaused(t *testing.T) {
	const iters = 60
	// The read timeout outlasts the pause, so every call queued on a paused
	// node gets its answer after SIGCONT and can clean up a late grant.
	nodes := startRLNodes(t, 5, false, 5*time.Second)
	r := newRL(t, nodes, WithAutoRenew(false))
	nodeTimeout := r.c.Cfg.Timeout(r.c.Cfg.TTL)
	warmUp(t, r)
	ctx := context.Background()
	const name = "two-paused"
	// Each TryLock starts from a name free on every live node: an Unlock
	// returns once a quorum has released, and the rest of its releases (and
	// a late grant's, sent once that grant answers) may still be on their
	// way. On a busy machine a server ran the next TryLock first, and with a
	// straggler's late grant that made a majority refuse it.
	measure := func(phase string, live ...int) (acquire, release []time.Duration) {
		t.Helper()
		for i := range iters {
			require.Eventually(t, func() bool { return len(holding(t, nodes, name, live...)) == 0 }, 3*time.Second, time.Millisecond,
				"%s: before TryLock #%d, the last release, on nodes %v", phase, i, holding(t, nodes, name, live...))
			start := time.Now()
			l, err := r.TryLock(ctx, name)
			if err != nil {
				t.Fatalf("%s: TryLock() #%d = %v", phase, i, err)
			}
			mid := time.Now()
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("%s: Unlock() #%d = %v", phase, i, err)
			}
			done := time.Since(mid)
			// Returned: a quorum of the five released, so no more of the
			// live nodes than those outside a quorum still hold it.
			if n := ownedBy(t, nodes, name, l.Owner(), live...); n > len(live)-r.c.Pool.Quorum {
				t.Fatalf("%s: after Unlock() #%d returned nil, %d of the live nodes %v still hold its key", phase, i, n, live)
			}
			acquire = append(acquire, mid.Sub(start))
			release = append(release, done)
		}
		return acquire, release
	}
	healthy, healthyRel := measure("healthy", 0, 1, 2, 3, 4)
	// The phase below also starts from a name free on the two it pauses.
	require.Eventually(t, func() bool { return len(holding(t, nodes, name, 0, 1, 2, 3, 4)) == 0 }, 3*time.Second, time.Millisecond,
		"the healthy phase's last release, on nodes %v", holding(t, nodes, name, 0, 1, 2, 3, 4))
	resume := pause(t, nodes, 3, 4)
	defer resume()
	paused, pausedRel := measure("2 of 5 paused", 0, 1, 2)
	resume()

	hm, pm := median(healthy), median(paused)
	t.Logf("TryLock median: healthy %v, 2 paused %v (node timeout %v); Unlock median: healthy %v, 2 paused %v",
		hm, pm, nodeTimeout, median(healthyRel), median(pausedRel))
	if pm > hm+20*time.Millisecond || pm > nodeTimeout/4 {
		t.Errorf("TryLock median with 2 paused = %v, want near the healthy %v (< +20ms) and far below the node timeout %v", pm, hm, nodeTimeout)
	}
	if !eventually(3*time.Second, func() bool { return len(holding(t, nodes, name, 3, 4)) == 0 }) {
		t.Errorf("late grants still held on nodes %v after SIGCONT, want released", holding(t, nodes, name, 3, 4))
	}
}

// TestRedlockThreeKilled: a majority down fails fast, bounded by the node
// timeout, and the minority that granted is released.
func TestRedlockThreeKilled(t *testing.T) {
	const nodeTimeout = 100 * time.Millisecond
	nodes := startRLNodes(t, 5, false, time.Second)
	r := newRL(t, nodes, WithNodeTimeout(nodeTimeout), WithAutoRenew(false))
	warmUp(t, r)
	for _, i := range []int{2, 3, 4} {
		nodes[i].srv.Kill(t)
	}
	ctx := context.Background()
	start := time.Now()
	_, err := r.TryLock(ctx, "three-killed")
	took := time.Since(start)
	if !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock() with 3 of 5 killed = %v, want ErrNotObtained", err)
	}
	failed := nodeErrors(err)
	for _, i := range []int{2, 3, 4} {
		if failed[i] == nil {
			t.Errorf("TryLock() = %v, want a NodeError for killed node %d", err, i)
		}
	}
	// One node timeout for the attempt (go-redis keeps re-dialling a dead
	// node past it); the release to nodes that never answered is not waited
	// for (core.acquire, step 5).
	if limit := nodeTimeout + 150*time.Millisecond; took > limit {
		t.Errorf("TryLock() took %v, want <= %v (node timeout + slack)", took, limit)
	}
	if got := holding(t, nodes, "three-killed", 0, 1); len(got) != 0 {
		t.Errorf("lock key left on live nodes %v, want released", got)
	}
	t.Logf("quorum failure with 3 killed in %v (node timeout %v)", took, nodeTimeout)
}

// TestRedlockValidityUsedUp: a grant that completes after the lock's
// validity is not a lock; every node is released before the keys expire.
func TestRedlockValidityUsedUp(t *testing.T) {
	t.Parallel()
	// drift 0.4: validity is 0.6 x TTL - 2ms, so the keys outlive the
	// validity by 0.4 x TTL and "released" can be told from "expired".
	const drift = 0.4

	t.Run("slow node", func(t *testing.T) {
		const ttl, delay = 500 * time.Millisecond, 350 * time.Millisecond // validity 298ms
		nodes := startRLNodes(t, 5, true, 2*time.Second)
		r := newRL(t, nodes, WithTTL(ttl), WithDriftFactor(drift), WithNodeTimeout(2*time.Second), WithAutoRenew(false))
		warmUp(t, r)
		// Open spare connections to node 2, so that the release does not
		// wait for a delayed handshake behind the acquire in flight.
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() { nodes[2].client.Do(context.Background(), "DEBUG", "SLEEP", "0.05") })
		}
		wg.Wait()
		nodes[3].srv.Kill(t)
		nodes[4].srv.Kill(t)
		nodes[2].proxy.SetDelay(delay)
		watches := make([]*expiryWatch, 3)
		for i := range watches {
			watches[i] = watchExpiry(t, nodes[i].admin)
		}
		start := time.Now()
		_, err := r.TryLock(context.Background(), "slow")
		took := time.Since(start)
		if !errors.Is(err, ErrNotObtained) {
			t.Fatalf("TryLock() = %v, want ErrNotObtained: the quorum needs the slow node, whose grant lands after the validity", err)
		}
		if failed := nodeErrors(err); failed[2] == nil {
			t.Errorf("TryLock() = %v, want a NodeError for the slow node 2", err)
		}
		if !eventually(time.Second, func() bool { return len(holding(t, nodes, "slow", 0, 1, 2)) == 0 }) {
			t.Errorf("lock key left on nodes %v, want released", holding(t, nodes, "slow", 0, 1, 2))
		}
		for i, w := range watches {
			if w.expired(t, rlKey("slow")) {
				t.Errorf("node %d: the lock key expired: the attempt must release, not leave its key to the TTL", i)
			}
		}
		nodes[2].proxy.SetDelay(0)
		t.Logf("failed in %v (validity %v, node 2 delay %v)", took, ttl-(time.Duration(float64(ttl)*drift)+2*time.Millisecond), delay)
	})

	t.Run("pause before final check", func(t *testing.T) {
		const ttl = time.Second // validity 598ms
		nodes := startRLNodes(t, 5, false, time.Second)
		r := newRL(t, nodes, WithTTL(ttl), WithDriftFactor(drift), WithNodeTimeout(200*time.Millisecond), WithAutoRenew(false))
		warmUp(t, r)
		all := indices(1<<5-1, 5)
		watches := make([]*expiryWatch, 5)
		for i := range watches {
			watches[i] = watchExpiry(t, nodes[i].admin)
		}
		r.c.Hooks.BeforeFinalCheck = func() { time.Sleep(650 * time.Millisecond) }
		_, err := r.TryLock(context.Background(), "stalled")
		r.c.Hooks.BeforeFinalCheck = nil
		if !errors.Is(err, ErrNotObtained) {
			t.Fatalf("TryLock() with a pause past the validity = %v, want ErrNotObtained", err)
		}
		// Checked at once: the keys would live 350ms more had the attempt
		// not released them.
		if got := holding(t, nodes, "stalled", all...); len(got) != 0 {
			t.Errorf("lock key left on nodes %v, want released", got)
		}
		for i, w := range watches {
			if w.expired(t, rlKey("stalled")) {
				t.Errorf("node %d: the lock key expired, want it released, not left to the TTL", i)
			}
		}
		l, err := r.TryLock(context.Background(), "stalled")
		if err != nil {
			t.Fatalf("TryLock() after the failed attempt = %v, want the name free", err)
		}
		l.Unlock(context.Background())
	})
}

// TestRedlockTokensSkewed: tokens strictly increase over 200 acquisitions
// while one node's counter jumps far ahead and nodes restart empty.
func TestRedlockTokensSkewed(t *testing.T) {
	t.Parallel()
	const name, skew = "skewed", int64(1_000_000_000_000)
	nodes := startRLNodes(t, 5, false, time.Second)
	r := newRL(t, nodes, WithNodeTimeout(500*time.Millisecond), WithAutoRenew(false), WithRetry(ConstantRetry(5*time.Millisecond)))
	ctx := context.Background()
	fence := rlKey(name) + ":fence"
	var tokens []int64
	for i := range 200 {
		switch i {
		case 50:
			if err := nodes[0].admin.IncrBy(ctx, fence, skew).Err(); err != nil {
				t.Fatalf("INCRBY %s = %v", fence, err)
			}
		case 100:
			nodes[0].srv.Restart(t) // loses the skewed counter
		case 150:
			nodes[3].srv.Restart(t)
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		l, err := r.Lock(lctx, name)
		cancel()
		if err != nil {
			t.Fatalf("Lock() #%d = %v", i, err)
		}
		if n := len(tokens); n > 0 && l.Token() <= tokens[n-1] {
			t.Fatalf("token #%d = %d after %d, want strictly increasing", i, l.Token(), tokens[n-1])
		}
		tokens = append(tokens, l.Token())
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock() #%d = %v", i, err)
		}
	}
	jump := slices.IndexFunc(tokens, func(tok int64) bool { return tok > tokens[0]+skew/2 })
	t.Logf("tokens %d .. %d; first token carrying the skew: #%d; #49 %d, #99 %d, #100 %d, #199 %d",
		tokens[0], tokens[len(tokens)-1], jump, tokens[49], tokens[99], tokens[100], tokens[199])
}

// TestRedlockWriteBackRetention: when one master's counter is ahead, the
// token is its counter plus one and the others are raised to it (raise.lua).
// The master that minted it keeps its counter for the Redlock's retention,
// the raised ones for the default, as a write-back keeps
// (WithFenceRetention): the floor the acquire sent must not reach raise.lua
// as a retention, with the default retention and with one of its own.
func TestRedlockWriteBackRetention(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		opts      []Option
		retention time.Duration
	}{
		{"default retention", nil, scripts.DefaultFenceRetention},
		{"WithFenceRetention(1h)", []Option{WithFenceRetention(time.Hour)}, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nodes := startRLNodes(t, 3, false, time.Second)
			r := newRL(t, nodes, append([]Option{WithAutoRenew(false)}, tc.opts...)...)
			ctx := context.Background()
			// TryLock returns at a quorum: the token is the ahead master's
			// only when its reply is among the first two; otherwise the
			// other two agree on the floor and nothing is written back. The
			// ahead master changes at each try, so that one master whose
			// replies are always last (scheduled late) does not fail all.
			for try := range 20 {
				name := fmt.Sprintf("ahead%d", try)
				fence := rlKey(name) + ":fence"
				ahead := time.Now().Add(time.Hour).UnixMicro()
				m := try % len(nodes) // the master whose counter is ahead
				require.NoError(t, nodes[m].admin.Set(ctx, fence, ahead, 30*time.Minute).Err())
				l, err := r.TryLock(ctx, name)
				require.NoError(t, err)
				if l.Token() != ahead+1 {
					require.NoError(t, l.Unlock(ctx))
					continue
				}
				atToken := 0
				for i, n := range nodes {
					// The write-back needs a quorum before TryLock returns;
					// the third master's may come after. A master whose
					// acquire was still on its way when the write-back
					// reached it mints on top of it: its counter ends past
					// the token, which keeps the next token above this one.
					var counter int64
					require.Eventually(t, func() bool {
						counter, err = n.admin.Get(ctx, fence).Int64()
						return err == nil && counter >= ahead+1
					}, 5*time.Second, time.Millisecond, "master %d's counter raised to the token", i)
					if i == m {
						require.Equal(t, ahead+1, counter, "master %d minted the token", m)
					}
					if counter == ahead+1 {
						atToken++
					}
					life := scripts.DefaultFenceRetention
					if i == m {
						life = tc.retention
					}
					assert.InDelta(t, float64(life), float64(n.admin.PTTL(ctx, fence).Val()),
						float64(time.Minute), "master %d's counter's life", i)
				}
				// The write-back wrote the token itself: a quorum holds it.
				assert.GreaterOrEqual(t, atToken, 2, "masters whose counter is the token")
				require.NoError(t, l.Unlock(ctx))
				return
			}
			t.Fatal("in 20 tries, no token was the ahead master's counter plus one")
		})
	}
}

// TestRedlockMutualExclusion increments a key on a sixth server with a
// non-atomic GET/SET inside a Redlock over five: any overlap of two holders
// loses an update.
func TestRedlockMutualExclusion(t *testing.T) {
	t.Parallel()
	nodes := startRLNodes(t, 5, false, time.Second)
	r := newRL(t, nodes, WithTTL(5*time.Second), WithNodeTimeout(250*time.Millisecond),
		WithRetry(ExponentialRetry(time.Millisecond, 8*time.Millisecond)))
	counter := redistest.Start(t).Client(t) // the resource: not one of the lock nodes
	start := time.Now()
	rec := hammer(t, r, counter, "counter", "rl:counter", 8, 100)
	t.Logf("%d critical sections in %v, tokens %d .. %d", len(rec.tokens), time.Since(start).Round(time.Millisecond), rec.tokens[0], rec.tokens[len(rec.tokens)-1])
}

// TestRedlockExtend: Extend needs a quorum; without one it reports an error
// and keeps the lock until its current Until (cut to a shorter lease's, which
// the silent nodes may yet set), unless a quorum says the lock is not ours
// (ErrNotHeld, lost). It never creates a key.
func TestRedlockExtend(t *testing.T) {
	t.Parallel()
	// 500ms: the healthy calls of these cases must answer within it, and a
	// full -race run on 2 cores once kept one master's Unlock reply past
	// 200ms (an Unlock that reached 2 of 5 where 3 were up). The black-holed
	// cases wait it out, a few seconds in all.
	const nodeTimeout = 500 * time.Millisecond
	nodes := startRLNodes(t, 5, true, time.Second)
	r := newRL(t, nodes, WithNodeTimeout(nodeTimeout), WithAutoRenew(false))
	warmUp(t, r)
	ctx := context.Background()
	all := indices(1<<5-1, 5)
	blackhole := func(idx ...int) {
		for i, nd := range nodes {
			nd.proxy.Blackhole(slices.Contains(idx, i))
		}
	}
	defer blackhole()
	pttl := func(i int, name string) time.Duration {
		return nodes[i].admin.PTTL(ctx, rlKey(name)).Val()
	}
	// takeEverywhere takes name and waits until every node holds it: TryLock
	// returns at quorum, and these scenarios start from a lock on all nodes.
	// Right after a black hole ends, an acquisition may leave out the nodes
	// that were in it while a probe of theirs is on the wire (node.admit):
	// such a lock is released and taken again.
	takeEverywhere := func(t *testing.T, name string) *Lock {
		t.Helper()
		var l *Lock
		if !eventually(3*time.Second, func() bool {
			var err error
			if l, err = r.TryLock(ctx, name); err != nil {
				t.Fatalf("TryLock() = %v", err)
			}
			if eventually(500*time.Millisecond, func() bool { return ownedBy(t, nodes, name, l.Owner(), all...) == 5 }) {
				return true
			}
			require.NoError(t, l.Unlock(ctx))
			return false
		}) {
			t.Fatalf("lock never reached all 5 nodes")
		}
		return l
	}

	t.Run("2 of 5 down", func(t *testing.T) {
		l := takeEverywhere(t, "extend-2")
		defer l.Unlock(ctx)
		blackhole(3, 4)
		defer blackhole()
		if err := l.Extend(ctx, 5*time.Second); err != nil {
			t.Fatalf("Extend() with 2 of 5 down = %v, want nil", err)
		}
		if left := time.Until(l.Until()); left > 5*time.Second || left < 4*time.Second {
			t.Errorf("Until() after Extend(5s) = now + %v, want just under 5s", left)
		}
		// Every up node got the extension, whether or not it was in the
		// quorum the call returned on.
		for _, i := range []int{0, 1, 2} {
			if !eventually(time.Second, func() bool { d := pttl(i, "extend-2"); return d > 0 && d <= 5*time.Second }) {
				t.Errorf("node %d: PTTL = %v, want extended to <= 5s", i, pttl(i, "extend-2"))
			}
		}
	})

	// 3 of 5 down: no node said "not ours", so the outcome is unknown and
	// the lock is still held until its current Until (Lock.Extend's doc):
	// unchanged by a longer lease (the default TTL is 10s), cut to a shorter
	// one's validity, which the nodes that did not answer may yet set. One
	// unanswered Extend per lock: the Unlock after it needs the nodes back.
	for _, ttl := range []time.Duration{20 * time.Second, 5 * time.Second} {
		t.Run(fmt.Sprintf("3 of 5 down, Extend(%v)", ttl), func(t *testing.T) {
			l := takeEverywhere(t, fmt.Sprintf("extend-3-%d", ttl.Milliseconds()))
			until := l.Until()
			blackhole(2, 3, 4)
			sent := time.Now()
			err := l.Extend(ctx, ttl)
			blackhole()
			if err == nil {
				t.Fatalf("Extend() with 3 of 5 down = nil, want an error")
			}
			if errors.Is(err, ErrNotHeld) {
				t.Errorf("Extend() = %v, want an error other than ErrNotHeld: no node said the lock is not ours", err)
			}
			failed := nodeErrors(err)
			for _, i := range []int{2, 3, 4} {
				if failed[i] == nil {
					t.Errorf("Extend() = %v, want a NodeError for down node %d", err, i)
				}
			}
			if err := l.Err(); err != nil {
				t.Errorf("Err() after the failed Extend = %v, want nil (still held)", err)
			}
			switch {
			case ttl > 10*time.Second && !l.Until().Equal(until):
				t.Errorf("Until() moved by %v on a failed Extend, want unchanged", l.Until().Sub(until))
			case ttl < 10*time.Second && l.Until().After(sent.Add(ttl)):
				t.Errorf("Until() = sent + %v after a failed Extend, want no later than the shorter lease", l.Until().Sub(sent))
			}
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("Unlock() = %v", err)
			}
		})
	}

	t.Run("not ours on a minority", func(t *testing.T) {
		l := takeEverywhere(t, "extend-minority")
		eventually(time.Second, func() bool { return ownedBy(t, nodes, "extend-minority", l.Owner(), all...) == 5 })
		for _, i := range []int{0, 1} {
			nodes[i].admin.Del(ctx, rlKey("extend-minority"))
		}
		if err := l.Extend(ctx, 5*time.Second); err != nil {
			t.Fatalf("Extend() with the key gone on 2 of 5 = %v, want nil (quorum of 3)", err)
		}
		time.Sleep(20 * time.Millisecond) // any straggling extend lands
		if got := holding(t, nodes, "extend-minority", 0, 1); len(got) != 0 {
			t.Errorf("Extend re-created the key on nodes %v, want never", got)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock() = %v", err)
		}
	})

	t.Run("not ours on a majority", func(t *testing.T) {
		l := takeEverywhere(t, "extend-majority")
		eventually(time.Second, func() bool { return ownedBy(t, nodes, "extend-majority", l.Owner(), all...) == 5 })
		for _, i := range []int{0, 1, 2} {
			nodes[i].admin.Del(ctx, rlKey("extend-majority"))
		}
		if err := l.Extend(ctx, 5*time.Second); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("Extend() with the key gone on 3 of 5 = %v, want ErrNotHeld", err)
		}
		if err := l.Err(); !errors.Is(err, ErrLost) {
			t.Errorf("Err() = %v, want ErrLost", err)
		}
		if got := holding(t, nodes, "extend-majority", 0, 1, 2); len(got) != 0 {
			t.Errorf("Extend re-created the key on nodes %v, want never", got)
		}
		if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
			t.Errorf("Unlock() of a lost lock = %v, want ErrNotHeld", err)
		}
		if !eventually(time.Second, func() bool { return len(holding(t, nodes, "extend-majority", all...)) == 0 }) {
			t.Errorf("lock key left on nodes %v after Unlock of the lost lock, want released", holding(t, nodes, "extend-majority", all...))
		}
	})

	t.Run("after expiry", func(t *testing.T) {
		l, err := r.TryLock(ctx, "extend-expired", WithTTL(200*time.Millisecond))
		if err != nil {
			t.Fatalf("TryLock() = %v", err)
		}
		<-l.Done()
		if !eventually(time.Second, func() bool { return len(holding(t, nodes, "extend-expired", all...)) == 0 }) {
			t.Fatalf("lock key still on nodes %v after its TTL", holding(t, nodes, "extend-expired", all...))
		}
		if err := l.Extend(ctx, 5*time.Second); !errors.Is(err, ErrNotHeld) {
			t.Errorf("Extend() after expiry = %v, want ErrNotHeld", err)
		}
		time.Sleep(20 * time.Millisecond) // a stray extend would have landed
		if got := holding(t, nodes, "extend-expired", all...); len(got) != 0 {
			t.Errorf("Extend after expiry created the key on nodes %v, want none", got)
		}
	})
}

// TestRedlockWatchdog: the watchdog keeps a short lock held over a Redlock;
// when a majority stops answering, Done closes by Until with ErrLost.
func TestRedlockWatchdog(t *testing.T) {
	const ttl = 300 * time.Millisecond
	nodes := startRLNodes(t, 5, false, time.Second)
	r := newRL(t, nodes, WithTTL(ttl), WithNodeTimeout(100*time.Millisecond))
	other := newRL(t, nodes, WithNodeTimeout(100*time.Millisecond))
	warmUp(t, r)
	ctx := context.Background()
	l, err := r.TryLock(ctx, "watched")
	if err != nil {
		t.Fatalf("TryLock() = %v", err)
	}
	first := l.Until()
	end := time.Now().Add(1500 * time.Millisecond) // 5 TTLs
	for time.Now().Before(end) {
		time.Sleep(100 * time.Millisecond)
		if err := l.Err(); err != nil {
			t.Fatalf("Err() while renewed = %v, want nil", err)
		}
		if _, err := other.TryLock(ctx, "watched"); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("other TryLock() while held = %v, want ErrNotObtained", err)
		}
	}
	if moved := l.Until().Sub(first); moved < time.Second {
		t.Errorf("Until() moved %v over 1.5s of renewals, want > 1s", moved)
	}

	resume := pause(t, nodes, 2, 3, 4)
	defer resume()
	paused := time.Now()
	// What the machine does to any timer meanwhile (see TestLossClockScales).
	stopProbes := timerProbes(ttl + 2*time.Second)
	select {
	case <-l.Done():
	case <-time.After(ttl + time.Second):
		t.Fatalf("Done not closed %v after 3 of 5 paused", ttl+time.Second)
	}
	sched := stopProbes()
	closed := doneAt(l) // when the library closed it, not when this goroutine woke
	if late := closed.Sub(l.Until()); late > timerSlack+sched {
		t.Errorf("Done closed %v after Until, want <= %v plus the machine's worst timer delay meanwhile (%v)", late, timerSlack, sched)
	}
	if err := l.Err(); !errors.Is(err, ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", err)
	}
	resume()
	t.Logf("Done closed %v after the pause, %v after Until", closed.Sub(paused).Round(time.Millisecond), closed.Sub(l.Until()))
}

// TestRedlockUnlockTwoPaused: Unlock returns once a quorum released, without
// waiting for the paused nodes, which release after SIGCONT.
func TestRedlockUnlockTwoPaused(t *testing.T) {
	const nodeTimeout = 500 * time.Millisecond
	nodes := startRLNodes(t, 5, false, 3*time.Second)
	r := newRL(t, nodes, WithNodeTimeout(nodeTimeout), WithAutoRenew(false))
	warmUp(t, r)
	ctx := context.Background()
	l, err := r.TryLock(ctx, "unlock-paused")
	if err != nil {
		t.Fatalf("TryLock() = %v", err)
	}
	all := indices(1<<5-1, 5)
	eventually(time.Second, func() bool { return ownedBy(t, nodes, "unlock-paused", l.Owner(), all...) == 5 })
	resume := pause(t, nodes, 3, 4)
	defer resume()
	start := time.Now()
	err = l.Unlock(ctx)
	took := time.Since(start)
	if err != nil {
		t.Errorf("Unlock() with 2 of 5 paused = %v, want nil", err)
	}
	if took > nodeTimeout/5 {
		t.Errorf("Unlock() took %v, want well below the node timeout %v", took, nodeTimeout)
	}
	if got := holding(t, nodes, "unlock-paused", 0, 1, 2); len(got) != 0 {
		t.Errorf("lock key left on live nodes %v", got)
	}
	resume()
	if !eventually(2*time.Second, func() bool { return len(holding(t, nodes, "unlock-paused", 3, 4)) == 0 }) {
		t.Errorf("lock key left on resumed nodes %v, want released", holding(t, nodes, "unlock-paused", 3, 4))
	}
	t.Logf("Unlock with 2 of 5 paused: %v (node timeout %v)", took, nodeTimeout)
}

// TestNewRedlockSameServerTwice: one server given under two spellings is
// one vote, never two.
func TestNewRedlockSameServerTwice(t *testing.T) {
	t.Parallel()
	srvs := redistest.StartN(t, 2)
	client := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		return c
	}
	port := strings.TrimPrefix(srvs[1].Addr(), "127.0.0.1:")
	_, err := NewRedlock([]Client{client(srvs[0].Addr()), client(srvs[1].Addr()), client("localhost:" + port)})
	require.Error(t, err, "NewRedlock() with 127.0.0.1:P and localhost:P")
	assert.Contains(t, err.Error(), "one server")

	t.Run("identified on first contact", func(t *testing.T) {
		// The shared server is paused while the Redlock is built, so its
		// identity is learnt only on first use: its second spelling must
		// then lose its vote.
		a, b := client(srvs[0].Addr()), client(srvs[1].Addr())
		alias := client("localhost:" + port)
		srvs[1].Pause(t)
		r, err := NewRedlock([]Client{a, b, alias}, WithNodeTimeout(200*time.Millisecond))
		srvs[1].Resume(t)
		require.NoError(t, err, "NewRedlock() with an unreachable master")
		t.Cleanup(func() { r.Close() })
		ctx := context.Background()
		// The resumed server first runs what queued up while it was
		// stopped: on a loaded machine its first answers may come after
		// the 200ms node timeout, so the grant may take a few attempts.
		var l *Lock
		require.True(t, eventually(5*time.Second, func() bool {
			l, err = r.TryLock(ctx, "alias")
			return err == nil
		}), "TryLock() with 2 distinct masters up: %v", err)
		require.NoError(t, l.Unlock(ctx))

		srvs[0].Pause(t)
		defer srvs[0].Resume(t)
		_, err = r.TryLock(ctx, "alias")
		assert.ErrorIs(t, err, ErrNotObtained, "TryLock() with only the aliased server up must not get a quorum from it")
		assert.ErrorIs(t, err, node.ErrDuplicate)
	})
}

// TestNewRedlockReplicaOfMaster: a replica listed next to its master holds
// the master's keys, so it would give a lock taken on the master a second
// vote (its acquire script sees our own owner value and grants without a
// write). NewRedlock refuses it, whichever comes first in the list.
func TestNewRedlockReplicaOfMaster(t *testing.T) {
	t.Parallel()
	srvs := redistest.StartN(t, 2)
	host, port, _ := strings.Cut(srvs[0].Addr(), ":")
	replica := redistest.Start(t, "--replicaof", host, port)
	rcl := replica.Client(t)
	require.True(t, eventually(10*time.Second, func() bool {
		return strings.Contains(rcl.Info(context.Background(), "replication").Val(), "master_link_status:up")
	}), "the replica did not sync")
	for _, order := range [][]*redis.Client{
		{srvs[0].Client(t), rcl, srvs[1].Client(t)},
		{rcl, srvs[0].Client(t), srvs[1].Client(t)},
	} {
		_, err := NewRedlock([]Client{order[0], order[1], order[2]})
		require.ErrorIs(t, err, node.ErrDuplicate)
		assert.Contains(t, err.Error(), "is a replica of the other")
		requireOneLine(t, err)
	}
}

// TestRedlockMinorityHungKeepsLocks: a Redlock exists to tolerate a hung
// minority. With one master paused (or answering slower than the TTL),
// auto-renewed locks stay held, Do returns nil, and Extend and Unlock settle
// as soon as the quorum answered.
func TestRedlockMinorityHungKeepsLocks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		delay bool // a proxy delays replies instead of pausing the server
	}{
		{"5 masters, 1 paused", 5, false},
		{"3 masters, 1 paused", 3, false},
		{"3 masters, 1 slower than the TTL", 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A node timeout close to the TTL, so that "settled at the
			// quorum" (milliseconds) and "waited for the hung node" (the
			// node timeout) stay far apart even on a loaded machine.
			const ttl, nodeTimeout = 400 * time.Millisecond, 300 * time.Millisecond
			nodes := startRLNodes(t, tc.n, tc.delay, 3*time.Second)
			r := newRL(t, nodes, WithTTL(ttl), WithNodeTimeout(nodeTimeout))
			warmUp(t, r)
			ctx := context.Background()
			if tc.delay {
				nodes[0].proxy.SetDelay(2 * ttl)
			} else {
				defer pause(t, nodes, 0)()
			}

			l, err := r.TryLock(ctx, "minority")
			require.NoError(t, err, "TryLock() with a hung minority")
			err = r.Do(ctx, "minority-do", func(ctx context.Context) error {
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-time.After(4 * ttl): // the work under test: held across several renewals
					return nil
				}
			})
			assert.NoError(t, err, "Do() held for 4 TTLs with a hung minority")
			assert.NoError(t, l.Err(), "Err() after 4 TTLs with a hung minority")
			select {
			case <-l.Done():
				t.Errorf("Done() closed with a hung minority, want held")
			default:
			}

			start := time.Now()
			require.NoError(t, l.Extend(ctx, ttl), "Extend() with a hung minority")
			assert.Less(t, time.Since(start), nodeTimeout-50*time.Millisecond, "Extend() waited for the hung node")
			start = time.Now()
			require.NoError(t, l.Unlock(ctx), "Unlock() with a hung minority")
			assert.Less(t, time.Since(start), nodeTimeout-50*time.Millisecond, "Unlock() waited for the hung node")
		})
	}
}

// TestRedlockTTLAndTaken: a Redlock's TTL is what a quorum grants; a
// refusal names the holder and the refusing masters.
func TestRedlockTTLAndTaken(t *testing.T) {
	t.Parallel()
	nodes := startRLNodes(t, 3, false, time.Second)
	r := newRL(t, nodes, WithAutoRenew(false), WithTTL(10*time.Second))
	ctx := context.Background()
	l, err := r.TryLock(ctx, "rl-ttl")
	require.NoError(t, err)
	// TryLock returns once a quorum granted: the third grant may still be
	// on its way (on a loaded machine, behind the calls below).
	for _, n := range nodes {
		require.True(t, eventually(5*time.Second, func() bool {
			return n.admin.Get(ctx, rlKey("rl-ttl")).Val() == l.Owner()
		}), "every master holds the key")
	}
	// Shorten the lease on one master: the quorum's lease is the other two's
	// shorter one, not the shortest.
	require.NoError(t, nodes[0].admin.PExpire(ctx, rlKey("rl-ttl"), time.Second).Err())
	require.NoError(t, nodes[1].admin.PExpire(ctx, rlKey("rl-ttl"), 30*time.Second).Err())
	d, err := l.TTL(ctx)
	require.NoError(t, err)
	assert.Greater(t, d, 5*time.Second)
	assert.LessOrEqual(t, d, 10*time.Second)

	_, err = r.TryLock(ctx, "rl-ttl")
	var te *TakenError
	require.ErrorAs(t, err, &te)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.Equal(t, l.Owner(), te.Owner)
	// The attempt settles once a majority refused.
	assert.GreaterOrEqual(t, len(te.Nodes), 2, "refusing masters %v", te.Nodes)
	assert.Subset(t, []int{0, 1, 2}, te.Nodes)
	assert.Positive(t, te.TTL)
	assert.LessOrEqual(t, te.TTL, 10*time.Second, "the shortest lease among the refusing masters")

	require.NoError(t, nodes[2].admin.Del(ctx, rlKey("rl-ttl")).Err())
	require.NoError(t, nodes[1].admin.Del(ctx, rlKey("rl-ttl")).Err())
	_, err = l.TTL(ctx)
	require.ErrorIs(t, err, ErrNotHeld)
}
