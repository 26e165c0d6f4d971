package redlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// TestObserveBlackHole: an observer whose links go silent (the TCP
// connections stay open, nothing passes) while A leads says it cannot tell
// (Term 0) within the TTL plus a second, although no error reaches its
// connections; B is elected meanwhile; once the links heal the observer
// reports B within 2s. On one server, and on a Redlock of three whose
// observer is cut off from two masters (a quorum).
func TestObserveBlackHole(t *testing.T) {
	for _, c := range []struct{ masters, cut int }{{1, 1}, {3, 2}} {
		t.Run(fmt.Sprintf("masters=%d", c.masters), func(t *testing.T) {
			t.Parallel()
			observeBlackHole(t, c.masters, c.cut)
		})
	}
}

func observeBlackHole(t *testing.T, masters, cut int) {
	const name, ttl = "observe-blackhole", 2 * time.Second
	servers := redistest.StartN(t, masters)
	proxies := make([]*redistest.Proxy, masters)
	viaProxy, direct := make([]Client, masters), make([]Client, masters)
	for i, srv := range servers {
		proxies[i] = redistest.NewProxy(t, srv.Addr())
		viaProxy[i], direct[i] = goRedisDefaults(t, proxies[i].Addr()), goRedisDefaults(t, srv.Addr())
	}
	election := func(clients []Client) *Election {
		if masters == 1 {
			return newLocker(t, clients[0], WithTTL(ttl)).Election(name)
		}
		r, err := NewRedlock(clients, WithTTL(ttl))
		require.NoError(t, err)
		t.Cleanup(func() { r.Close() })
		return r.Election(name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := watch(election(viaProxy).Observe(ctx))
	for _, srv := range servers {
		subscribedObserver(t, srv, name, 1)
	}
	ea, eb := election(direct), election(direct)
	a, err := ea.Campaign(ctx, "a")
	require.NoError(t, err)
	i, _, _ := w.next(t, 0, 5*time.Second, func(l Leader) bool { return l.Term == a.Token() })

	for _, p := range proxies[:cut] {
		p.Blackhole(true)
	}
	cutAt := time.Now()
	require.NoError(t, a.Unlock(ctx))
	b, err := eb.Campaign(ctx, "b")
	require.NoError(t, err)
	defer b.Unlock(context.Background())
	i, _, at := w.next(t, i+1, ttl+3*time.Second, func(l Leader) bool { return l.Term == 0 })
	assert.Less(t, at.Sub(cutAt), ttl+time.Second, "Term 0 %v after the cut", at.Sub(cutAt))

	for _, p := range proxies[:cut] {
		p.Blackhole(false)
	}
	healed := time.Now()
	// From the heal on: B, with the lease it has (a report of B while cut
	// off, from an announcement heard on the master still reachable, has
	// TTL 0: B was elected, not known to hold now).
	_, l, at := w.next(t, i+1, 5*time.Second, func(l Leader) bool { return l.Term != 0 && l.TTL > 0 })
	assert.Equal(t, b.Token(), l.Term, "after the heal: the leader elected meanwhile (%v)", w.leaders())
	assert.Less(t, at.Sub(healed), 2*time.Second, "the leader %v after the heal", at.Sub(healed))
	for _, r := range w.leaders()[i+1:] {
		assert.NotEqual(t, a.Token(), r.Term, "A reported again after it resigned and the observer said Term 0: %v", w.leaders())
	}
	assertTermsNeverBack(t, w.leaders())
}

// assertTermsNeverBack: on Observe's channel a term never goes backwards
// except through 0.
func assertTermsNeverBack(t *testing.T, ls []Leader) {
	t.Helper()
	var last int64
	for _, l := range ls {
		if l.Term != 0 {
			assert.GreaterOrEqual(t, l.Term, last, "term went backwards without a 0 between: %v", ls)
		}
		last = l.Term
	}
}

// TestObserveLateAnnouncement: an announcement that reaches the observer
// only after it has said Term 0 (a pub/sub reader held it back while the
// observer's reads failed: on a busy machine TestObserveBlackHole met this)
// names a term already reported and ended. It must not be reported again:
// after the 0 it would read as that leader coming back. With a successor
// elected meanwhile the observer reports the successor alone; with none,
// nothing. A term never reported (a leader that came and went between two
// reads) is still reported before its successor, with TTL 0.
func TestObserveLateAnnouncement(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk := newLocker(t, srv.Client(t), WithTTL(5*time.Second))
	ctx := context.Background()
	e := lk.Election("observe-late")
	// An observer that has reported leader a and then Term 0, whose
	// readers are up; refresh is what it runs on each batch of messages.
	observerAfter := func(reported int64) *observer {
		o := &observer{e: e, out: make(chan Leader, observeBuffer), up: []bool{true}, nUp: 1,
			highest: reported, timer: time.NewTimer(time.Hour)}
		o.timer.Stop()
		t.Cleanup(func() { o.timer.Stop() })
		return o
	}
	drain := func(o *observer) []Leader {
		var got []Leader
		for len(o.out) > 0 {
			got = append(got, <-o.out)
		}
		return got
	}
	a, err := e.Campaign(ctx, "a")
	require.NoError(t, err)
	require.NoError(t, a.Unlock(ctx))
	late := Leader{Term: a.Token(), Value: "a"}

	o := observerAfter(a.Token())
	o.refresh(ctx, []Leader{late})
	assert.Empty(t, drain(o), "no leader: a late announcement of the ended term is not news")

	b, err := e.Campaign(ctx, "b")
	require.NoError(t, err)
	defer b.Unlock(ctx)
	o = observerAfter(a.Token())
	o.refresh(ctx, []Leader{late})
	got := drain(o)
	require.Len(t, got, 1, "%v", got)
	assert.Equal(t, b.Token(), got[0].Term, "the successor alone: %v", got)

	// The same announcement to an observer that never reported a: a
	// leader that came and went, reported before its successor.
	o = observerAfter(0)
	o.refresh(ctx, []Leader{late})
	got = drain(o)
	require.Len(t, got, 2, "%v", got)
	assert.Equal(t, late, got[0])
	assert.Equal(t, b.Token(), got[1].Term)
}
