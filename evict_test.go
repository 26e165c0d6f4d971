package redlock

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// logRecords is a slog.Handler that keeps every record, for tests that count
// what the library logged.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecords) WithGroup(string) slog.Handler            { return h }

func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// logged reports whether a record of level whose message contains msg was
// logged.
func (h *logRecords) logged(level slog.Level, msg string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.Level == level && strings.Contains(r.Message, msg) {
			return true
		}
	}
	return false
}

// warmedUp lets the constructor wait up to 5s for the warm-up, which reads
// the policy, so that a loaded machine cannot make a warning go missing.
var warmedUp = WithNodeTimeout(5 * time.Second)

// evictionWarnings returns the attributes of each eviction warning logged so
// far, as strings, in order.
func (h *logRecords) evictionWarnings() []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range h.recs {
		if r.Level != slog.LevelWarn || !strings.Contains(r.Message, "maxmemory-policy") {
			continue
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.String()
			return true
		})
		out = append(out, attrs)
	}
	return out
}

// TestEvictionWarning: a Locker on a server whose maxmemory-policy may evict
// keys with an expiry logs exactly one warning naming the node and the
// policy, once per constructor; noeviction logs none.
func TestEvictionWarning(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	for _, tt := range []struct {
		policy string
		want   int
	}{
		{"volatile-lru", 1},
		{"volatile-lfu", 1},
		{"volatile-random", 1},
		{"volatile-ttl", 1},
		{"allkeys-lru", 1},
		{"allkeys-lfu", 1},
		{"allkeys-random", 1},
		{"noeviction", 0},
	} {
		t.Run(tt.policy, func(t *testing.T) {
			srv.Do(t, "CONFIG", "SET", "maxmemory-policy", tt.policy)
			h := &logRecords{}
			newLocker(t, cl, WithLogger(slog.New(h)), warmedUp)
			got := h.evictionWarnings()
			require.Len(t, got, tt.want, "eviction warnings of NewLocker() with %s", tt.policy)
			if tt.want == 0 {
				return
			}
			assert.Equal(t, tt.policy, got[0]["policy"])
			assert.Contains(t, got[0]["addr"], srv.Addr())
			assert.Equal(t, "0", got[0]["node"])

			// A second constructor warns again, once: the warning belongs
			// to the constructor, not to the client or the process.
			newLocker(t, cl, WithLogger(slog.New(h)), warmedUp)
			assert.Len(t, h.evictionWarnings(), 2, "eviction warnings after a second NewLocker()")
		})
	}
}

// TestEvictionWarningRedlock: NewRedlock warns once for each master with an
// evicting policy, naming it, and not for the others.
func TestEvictionWarningRedlock(t *testing.T) {
	t.Parallel()
	srvs := redistest.StartN(t, 3)
	srvs[0].Do(t, "CONFIG", "SET", "maxmemory-policy", "volatile-lru")
	srvs[2].Do(t, "CONFIG", "SET", "maxmemory-policy", "allkeys-lfu")
	clients := make([]Client, len(srvs))
	for i, s := range srvs {
		clients[i] = s.Client(t)
	}
	h := &logRecords{}
	r, err := NewRedlock(clients, WithLogger(slog.New(h)), warmedUp)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })

	got := map[string]string{}
	for _, w := range h.evictionWarnings() {
		_, dup := got[w["node"]]
		assert.False(t, dup, "node %s warned twice", w["node"])
		got[w["node"]] = w["policy"]
		i, err := strconv.Atoi(w["node"])
		require.NoError(t, err, "node %q", w["node"])
		assert.Contains(t, w["addr"], srvs[i].Addr(), "addr of node %d", i)
	}
	assert.Equal(t, map[string]string{"0": "volatile-lru", "2": "allkeys-lfu"}, got, "eviction warnings of NewRedlock(), by node")
}

// TestEvictionWarningConfigRefused: a client whose ACL user may not run
// CONFIG (as on a managed Redis that hides it) gets a working Locker and no
// warning, on a server whose policy evicts; the default user, who may run
// CONFIG, is warned on the same server.
func TestEvictionWarningConfigRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory-policy", "volatile-lru")
	srv.ACLUser(t, "noconfig", "pw", "~*", "&*", "+@all", "-config")
	narrow := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "noconfig", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { narrow.Close() })
	ctx := context.Background()
	require.Error(t, narrow.ConfigGet(ctx, "maxmemory-policy").Err(), "the ACL user must be refused CONFIG for this test")

	h := &logRecords{}
	lk, err := NewLocker(narrow, WithLogger(slog.New(h)), warmedUp)
	require.NoError(t, err, "NewLocker() by a user refused CONFIG")
	t.Cleanup(func() { lk.Close() })
	assert.Empty(t, h.evictionWarnings(), "eviction warnings when CONFIG is refused")
	l, err := lk.TryLock(ctx, "noconfig")
	require.NoError(t, err, "TryLock() by a user refused CONFIG")
	require.NoError(t, l.Unlock(ctx))

	newLocker(t, srv.Client(t), WithLogger(slog.New(h)), warmedUp)
	assert.Len(t, h.evictionWarnings(), 1, "eviction warnings for a user who may run CONFIG")
}

// TestEvictionWarningCluster: through a Cluster client CONFIG GET reaches one
// node, whose policy stands for the deployment: one warning, for the one
// client.
func TestEvictionWarningCluster(t *testing.T) {
	t.Parallel()
	cc := startCluster(t)
	require.NoError(t, cc.ConfigSet(context.Background(), "maxmemory-policy", "volatile-ttl").Err())
	h := &logRecords{}
	newLocker(t, cc, WithLogger(slog.New(h)), warmedUp)
	got := h.evictionWarnings()
	require.Len(t, got, 1, "eviction warnings of NewLocker() on a Cluster client")
	assert.Equal(t, "volatile-ttl", got[0]["policy"])
}
