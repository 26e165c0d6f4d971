package redlock

import (
	"context"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/redistest"
)

// BenchmarkLockUnlockAllocs reports the heap allocations of one uncontended
// Lock+Unlock pair on the hot paths: a Locker on a client with go-redis's
// default settings (a goroutine bounds the call), a Locker on a client with
// ContextTimeoutEnabled (the call runs inline), and a Redlock over 5
// masters. Allocation counts do not depend on the machine's load; read
// allocs/op, not ns/op.
func BenchmarkLockUnlockAllocs(b *testing.B) {
	srvs := redistest.StartN(b, 5)
	client := func(s *redistest.Server, ctxTimeout bool) *redis.Client {
		cl := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: ctxTimeout})
		b.Cleanup(func() { cl.Close() })
		return cl
	}
	for _, bc := range []struct {
		name    string
		clients func() []Client
	}{
		{"locker", func() []Client { return []Client{client(srvs[0], false)} }},
		{"locker-ctxtimeout", func() []Client { return []Client{client(srvs[0], true)} }},
		{"redlock5", func() []Client {
			var cls []Client
			for _, s := range srvs {
				cls = append(cls, client(s, false))
			}
			return cls
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var lk acquirer
			if cls := bc.clients(); len(cls) == 1 {
				lk = newLocker(b, cls[0])
			} else {
				rl, err := NewRedlock(cls)
				if err != nil {
					b.Fatalf("NewRedlock() = %v", err)
				}
				b.Cleanup(func() { rl.Close() })
				lk = rl
			}
			ctx := context.Background()
			name := "bench-allocs-" + bc.name
			once := func() {
				l, err := lk.Lock(ctx, name)
				if err != nil {
					b.Fatalf("Lock() = %v", err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatalf("Unlock() = %v", err)
				}
			}
			for range 20 { // dial the pool, load the scripts
				once()
			}
			b.ReportAllocs()
			for b.Loop() {
				once()
			}
		})
	}
}

// TestOwnerAndKeys: newLock's one-allocation key layout is the one the
// scripts expect, and the owner value is a fresh random UUID.
func TestOwnerAndKeys(t *testing.T) {
	t.Parallel()
	for _, metadata := range []bool{false, true} {
		owner, keys := engine.OwnerAndKeys(nil, "{redlock:x}", metadata)
		want := []string{"{redlock:x}", "{redlock:x}:fence", "{redlock:x}:queue", "{redlock:x}:waiting"}
		if metadata {
			want = append(want, "{redlock:x}:meta")
		}
		want = append(want, "{redlock:x}", "{redlock:x}:released", "{redlock:x}:queue", "{redlock:x}:waiting")
		if !slices.Equal(keys, want) {
			t.Errorf("ownerAndKeys(metadata=%v) keys = %q, want %q", metadata, keys, want)
		}
		u, err := uuid.Parse(owner)
		if err != nil || u.Version() != 4 || u.Variant() != uuid.RFC4122 || u.String() != owner {
			t.Errorf("owner = %q (%v), want a canonical random UUID", owner, err)
		}
		if other, _ := engine.OwnerAndKeys(nil, "{redlock:x}", metadata); other == owner {
			t.Errorf("two owners = %q, want distinct", owner)
		}
	}
}

// TestKeyAndChannel: the Lock call's one-allocation key and channel are
// LockKey's and ReleaseChannel's.
func TestKeyAndChannel(t *testing.T) {
	t.Parallel()
	key, channel := engine.KeyAndChannel("redlock:", "x")
	if want := engine.LockKey("redlock:", "x"); key != want {
		t.Errorf("keyAndChannel() key = %q, want %q", key, want)
	}
	if want := engine.ReleaseChannel(engine.LockKey("redlock:", "x")); channel != want {
		t.Errorf("keyAndChannel() channel = %q, want %q", channel, want)
	}
}

// TestLockUnlockAllocBudget pins the heap allocations of one uncontended
// Lock+Unlock pair on the hot paths (BenchmarkLockUnlockAllocs measures
// the same), so that a change that adds one to the common path fails here
// rather than in a benchmark run by hand: a cancellation or release fix that
// moved a Lock call's state to the heap once cost two. The counts do not
// depend on the machine's load (37 under -race, 36 without, since
// acquire.lua answers a grant with the bare token, which go-redis reads
// without a slice; two more than before the scripts declared the read
// holds and the queue in KEYS, each key a boxed string). A Redlock's
// do, by a few: whether a reply is already in when its round starts
// waiting decides whether a timer is taken, so it has no budget here. Not
// parallel: the allocation counter is the process's.
func TestLockUnlockAllocBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation budget; skipped with -short")
	}
	srvs := redistest.StartN(t, 1)
	client := func(s *redistest.Server, ctxTimeout bool) Client {
		cl := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: ctxTimeout})
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	for _, c := range []struct {
		name    string
		budget  float64
		clients func() []Client
	}{
		{"locker", 37, func() []Client { return []Client{client(srvs[0], false)} }},
		{"locker-ctxtimeout", 37, func() []Client { return []Client{client(srvs[0], true)} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			lk := newLocker(t, c.clients()[0], WithLossTracking(false))
			ctx := context.Background()
			name := "alloc-budget-" + c.name
			once := func() {
				l, err := lk.Lock(ctx, name)
				require.NoError(t, err)
				require.NoError(t, l.Unlock(ctx))
			}
			for range 20 { // dial the pool, load the scripts
				once()
			}
			got := testing.AllocsPerRun(500, once)
			assert.LessOrEqual(t, got, c.budget, "allocations per uncontended Lock+Unlock")
			t.Logf("%s: %.0f allocations per pair (budget %.0f)", c.name, got, c.budget)
		})
	}
}
