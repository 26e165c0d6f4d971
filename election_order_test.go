package redlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// TestObserveProclaimOrder: a leader Proclaims 50 values in a row, each
// after the previous Proclaim returned. The observer reports them in
// Proclaim order, never one twice, and its last report is the last value;
// it may skip a value only when a newer one replaced it before it read.
// On one server and on a Redlock of three, whose reads may lag a Proclaim
// that has not reached every master yet.
func TestObserveProclaimOrder(t *testing.T) {
	for _, masters := range []int{1, 3} {
		t.Run(fmt.Sprintf("masters=%d", masters), func(t *testing.T) {
			t.Parallel()
			servers := redistest.StartN(t, masters)
			elect := func() *Election {
				clients := make([]Client, masters)
				for i, srv := range servers {
					clients[i] = goRedisDefaults(t, srv.Addr())
				}
				if masters == 1 {
					return newLocker(t, clients[0]).Election("observe-order")
				}
				r, err := NewRedlock(clients)
				require.NoError(t, err)
				t.Cleanup(func() { r.Close() })
				return r.Election("observe-order")
			}
			proclaimInOrder(t, servers, elect(), elect())
		})
	}
}

func proclaimInOrder(t *testing.T, servers []*redistest.Server, observer, e *Election) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const values = 50
	w := watch(observer.Observe(ctx))
	for _, srv := range servers {
		subscribedObserver(t, srv, "observe-order", 1)
	}
	lead, err := e.Campaign(ctx, "v-00")
	require.NoError(t, err)
	defer lead.Unlock(context.Background())
	for i := 1; i <= values; i++ {
		require.NoError(t, e.Proclaim(ctx, lead, fmt.Sprintf("v-%02d", i)))
	}
	last := fmt.Sprintf("v-%02d", values)
	at, _, _ := w.next(t, 0, 5*time.Second, func(l Leader) bool { return l.Value == last })

	prev := -1
	for _, l := range w.leaders() {
		if l.Term != lead.Token() {
			continue
		}
		var i int
		_, err := fmt.Sscanf(l.Value, "v-%d", &i)
		require.NoError(t, err, "value %q", l.Value)
		assert.Greater(t, i, prev, "Observe reported %q after v-%02d: out of Proclaim order, or twice (%v)", l.Value, prev, w.leaders())
		prev = i
	}
	assert.Equal(t, values, prev, "the last report is the last value")

	// A value proclaimed again is a change like any other.
	require.NoError(t, e.Proclaim(ctx, lead, "v-01"))
	w.next(t, at+1, 5*time.Second, func(l Leader) bool { return l.Value == "v-01" })
}

// TestObserveAnnouncementTwice: a master that runs an announcement twice
// (go-redis's retry of a Proclaim whose reply came late) publishes it twice.
// The second message, arriving after a newer Proclaim, is the same
// announcement, not a new one: the observer keeps the newer value. Before
// announcements were numbered it read as the value proclaimed again, and
// the observer reported it after the newer one.
func TestObserveAnnouncementTwice(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	observer := newLocker(t, goRedisDefaults(t, srv.Addr())).Election("twice")
	e := newLocker(t, goRedisDefaults(t, srv.Addr())).Election("twice")
	w := watch(observer.Observe(ctx))
	subscribedObserver(t, srv, "twice", 1)
	// What the leader publishes, as the server sent it.
	spy := srv.Client(t).Subscribe(ctx, rlKey("twice")+electionSuffix)
	defer spy.Close()
	_, err := spy.Receive(ctx)
	require.NoError(t, err)
	lead, err := e.Campaign(ctx, "v-0")
	require.NoError(t, err)
	defer lead.Unlock(context.Background())
	require.NoError(t, e.Proclaim(ctx, lead, "v-1"))
	var first string
	for first == "" {
		m, err := spy.ReceiveMessage(ctx)
		require.NoError(t, err)
		if strings.HasSuffix(m.Payload, "\nv-1") {
			first = m.Payload
		}
	}
	require.NoError(t, e.Proclaim(ctx, lead, "v-2"))
	at, _, _ := w.next(t, 0, 5*time.Second, func(l Leader) bool { return l.Value == "v-2" })
	// v-1's announcement again, then a marker Proclaim: once the marker is
	// reported, the repeat has been taken in.
	require.NoError(t, srv.Client(t).Publish(ctx, rlKey("twice")+electionSuffix, first).Err())
	require.NoError(t, e.Proclaim(ctx, lead, "v-3"))
	w.next(t, at+1, 5*time.Second, func(l Leader) bool { return l.Value == "v-3" })
	var values []string
	for _, l := range w.leaders() {
		if l.Term == lead.Token() {
			values = append(values, l.Value)
		}
	}
	assert.NotContains(t, values[slices.Index(values, "v-2"):], "v-1", "v-1 reported after v-2: %v", values)
}

// TestObserveEndsWhileReconnectHangs: an observer whose connection was cut
// while its node is black-holed has go-redis re-dial it, and the new
// connection's handshake hangs (until the client's timeouts) holding the
// PubSub's mutex, which PubSub.Close waits for. Observe's channel still
// closes as soon as ctx ends: the connection's teardown comes after it, not
// before it (the channel closed about 5s after the cancel when it did).
func TestObserveEndsWhileReconnectHangs(t *testing.T) {
	t.Parallel()
	const name = "observe-reconnect-hangs"
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	cl := goRedisDefaults(t, proxy.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := newLocker(t, cl).Election(name).Observe(ctx)
	subscribedObserver(t, srv, name, 1)
	dialled := cl.PoolStats().PubSubStats.Created

	// Black-holed first, so that the re-dial after the reset reaches a node
	// that does not answer: its handshake hangs.
	proxy.Blackhole(true)
	proxy.Cut()
	// The pub/sub pool counts a connection once dialled, before its
	// handshake: from then on the re-dial holds the mutex.
	require.True(t, eventually(5*time.Second, func() bool { return cl.PoolStats().PubSubStats.Created > dialled }),
		"go-redis did not re-dial the observer's connection")

	cancel()
	cancelled := time.Now()
	timer := time.NewTimer(500 * time.Millisecond)
	defer timer.Stop()
	for open := true; open; {
		select {
		case _, open = <-ch:
		case <-timer.C:
			t.Fatalf("Observe channel open %v after the cancel, want closed within 500ms", time.Since(cancelled))
		}
	}
	t.Logf("channel closed %v after the cancel", time.Since(cancelled))
}
