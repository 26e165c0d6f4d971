package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// TestObserveBlackHole: an observer whose link goes silent (the TCP
// connection stays open, nothing passes) while A leads says it cannot
// tell (Term 0) within the TTL plus a second, although no error reaches
// its connection; B is elected meanwhile; once the link heals the
// observer reports B within 2s.
func TestObserveBlackHole(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name, ttl = "observe-blackhole", 2 * time.Second
	w := watch(newLocker(t, goRedisDefaults(t, proxy.Addr()), WithTTL(ttl)).Election(name).Observe(ctx))
	subscribedObserver(t, srv, name, 1)
	ea := newLocker(t, goRedisDefaults(t, srv.Addr()), WithTTL(ttl)).Election(name)
	eb := newLocker(t, goRedisDefaults(t, srv.Addr()), WithTTL(ttl)).Election(name)
	a, err := ea.Campaign(ctx, "a")
	require.NoError(t, err)
	i, _, _ := w.next(t, 0, 5*time.Second, func(l Leader) bool { return l.Term == a.Token() })

	proxy.Blackhole(true)
	cut := time.Now()
	require.NoError(t, a.Unlock(ctx))
	b, err := eb.Campaign(ctx, "b")
	require.NoError(t, err)
	defer b.Unlock(context.Background())
	i, _, at := w.next(t, i+1, ttl+3*time.Second, func(l Leader) bool { return l.Term == 0 })
	assert.Less(t, at.Sub(cut), ttl+time.Second, "Term 0 %v after the cut", at.Sub(cut))
	t.Logf("Term 0 %v after the cut", at.Sub(cut))

	proxy.Blackhole(false)
	healed := time.Now()
	_, l, at := w.next(t, i+1, 5*time.Second, func(l Leader) bool { return l.Term != 0 })
	assert.Equal(t, b.Token(), l.Term, "after the heal: the leader elected meanwhile (%v)", w.leaders())
	assert.Less(t, at.Sub(healed), 2*time.Second, "the leader %v after the heal", at.Sub(healed))
}
