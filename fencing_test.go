package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/redistest"
)

// fenceOutcome classifies the result of an Admit in table tests.
type fenceOutcome int

const (
	fenceAdmitted fenceOutcome = iota
	fenceStale
	fenceInvalid
)

func (o fenceOutcome) String() string {
	return [...]string{"admitted", "stale", "invalid"}[o]
}

// checkFenceOutcome fails the test unless err is the outcome want; for a
// stale token it also checks the tokens carried by the error.
func checkFenceOutcome(t *testing.T, call string, err error, want fenceOutcome, token, highest int64) {
	t.Helper()
	switch want {
	case fenceAdmitted:
		if err != nil {
			t.Fatalf("%s = %v, want nil", call, err)
		}
	case fenceStale:
		var stale *StaleTokenError
		if !errors.Is(err, ErrStaleToken) || !errors.As(err, &stale) {
			t.Fatalf("%s = %v, want a *StaleTokenError matching ErrStaleToken", call, err)
		}
		if stale.Token != token || stale.Highest != highest {
			t.Fatalf("%s = %+v, want Token %d, Highest %d", call, *stale, token, highest)
		}
	case fenceInvalid:
		if err == nil || errors.Is(err, ErrStaleToken) {
			t.Fatalf("%s = %v, want an invalid-input error not matching ErrStaleToken", call, err)
		}
	}
}

func TestFenceAdmitSequences(t *testing.T) {
	t.Parallel()
	type step struct {
		token       int64
		want        fenceOutcome
		wantHighest int64 // Highest() after the step
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"first token admitted", []step{{1, fenceAdmitted, 1}}},
		{"higher admitted", []step{{3, fenceAdmitted, 3}, {4, fenceAdmitted, 4}, {100, fenceAdmitted, 100}}},
		{"equal admitted", []step{{5, fenceAdmitted, 5}, {5, fenceAdmitted, 5}, {5, fenceAdmitted, 5}}},
		{"stale rejected", []step{{5, fenceAdmitted, 5}, {4, fenceStale, 5}, {1, fenceStale, 5}}},
		{"stale then higher", []step{{7, fenceAdmitted, 7}, {6, fenceStale, 7}, {8, fenceAdmitted, 8}, {7, fenceStale, 8}}},
		{"gap then stale", []step{{1, fenceAdmitted, 1}, {1 << 50, fenceAdmitted, 1 << 50}, {1<<50 - 1, fenceStale, 1 << 50}}},
		{"max int64", []step{{1<<63 - 1, fenceAdmitted, 1<<63 - 1}, {1<<63 - 2, fenceStale, 1<<63 - 1}}},
		{"zero invalid on empty fence", []step{{0, fenceInvalid, 0}}},
		{"negative invalid on empty fence", []step{{-1, fenceInvalid, 0}, {-1 << 63, fenceInvalid, 0}}},
		{"invalid leaves mark", []step{{9, fenceAdmitted, 9}, {0, fenceInvalid, 9}, {-9, fenceInvalid, 9}, {9, fenceAdmitted, 9}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f Fence
			if h := f.Highest(); h != 0 {
				t.Fatalf("zero Fence: Highest() = %d, want 0", h)
			}
			for i, s := range tt.steps {
				err := f.Admit(s.token)
				checkFenceOutcome(t, fmt.Sprintf("step %d: Admit(%d)", i, s.token), err, s.want, s.token, s.wantHighest)
				if h := f.Highest(); h != s.wantHighest {
					t.Fatalf("step %d: after Admit(%d): Highest() = %d, want %d", i, s.token, h, s.wantHighest)
				}
			}
		})
	}
}

func TestStaleTokenError(t *testing.T) {
	t.Parallel()
	var err error = &StaleTokenError{Token: 4, Highest: 9}
	wrapped := fmt.Errorf("writing: %w", err)
	if !errors.Is(wrapped, ErrStaleToken) {
		t.Errorf("errors.Is(%v, ErrStaleToken) = false, want true", wrapped)
	}
	if errors.Is(wrapped, ErrNotHeld) {
		t.Errorf("errors.Is(%v, ErrNotHeld) = true, want false", wrapped)
	}
	var stale *StaleTokenError
	if !errors.As(wrapped, &stale) || stale.Token != 4 || stale.Highest != 9 {
		t.Errorf("errors.As(%v) = %+v, want Token 4, Highest 9", wrapped, stale)
	}
	if got, want := err.Error(), "redlock: stale fencing token 4 (highest admitted 9)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestFenceAdmitDoesNotAllocate(t *testing.T) {
	var f Fence
	if allocs := testing.AllocsPerRun(1000, func() { _ = f.Admit(42) }); allocs != 0 {
		t.Errorf("Admit of an equal token: %v allocations, want 0", allocs)
	}
	token := int64(42)
	if allocs := testing.AllocsPerRun(1000, func() {
		token++
		_ = f.Admit(token)
	}); allocs != 0 {
		t.Errorf("Admit of a higher token: %v allocations, want 0", allocs)
	}
}

func BenchmarkFenceAdmit(b *testing.B) {
	b.Run("equal", func(b *testing.B) {
		var f Fence
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = f.Admit(7)
			}
		})
	})
	b.Run("rising", func(b *testing.B) {
		var f Fence
		var clock atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = f.Admit(clock.Add(1))
			}
		})
	})
}

// fenceCall is one Admit call as seen by checkFenceHistory. start and end
// come from one atomic counter read just before the call and just after it
// returned, so end(a) < start(b) proves that a returned before b began.
type fenceCall struct {
	token      int64
	start, end int64
	err        error
}

// runFenceHistory runs goroutines × perGoroutine calls of admit and returns
// them. Tokens follow a clock shared by all goroutines, with a jitter of ±3,
// so calls present equal, lower and higher tokens than their neighbours
// whatever the relative speed of the goroutines.
func runFenceHistory(t *testing.T, goroutines, perGoroutine int, admit func(token int64) error) []fenceCall {
	t.Helper()
	var seq, clock atomic.Int64
	calls := make([][]fenceCall, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			mine := make([]fenceCall, perGoroutine)
			for i := range mine {
				token := max(1, clock.Add(1)/int64(goroutines)+rng.Int64N(7)-3)
				start := seq.Add(1)
				err := admit(token)
				mine[i] = fenceCall{token: token, start: start, end: seq.Add(1), err: err}
			}
			calls[g] = mine
		})
	}
	wg.Wait()
	return slices.Concat(calls...)
}

// checkFenceHistory fails the test if fenceHistoryError finds a violation.
func checkFenceHistory(t *testing.T, calls []fenceCall, finalHighest int64) {
	t.Helper()
	var nAdmitted, nRepeat int
	seen := map[int64]bool{}
	for _, c := range calls {
		if c.err == nil {
			nAdmitted++
			if seen[c.token] {
				nRepeat++
			}
			seen[c.token] = true
		}
	}
	t.Logf("%d calls: %d admitted (%d of a token admitted before), %d rejected",
		len(calls), nAdmitted, nRepeat, len(calls)-nAdmitted)
	if nAdmitted == 0 || nAdmitted == len(calls) {
		t.Errorf("history has %d admitted calls out of %d, want some admitted and some rejected", nAdmitted, len(calls))
	}
	if err := fenceHistoryError(calls, finalHighest); err != nil {
		t.Fatal(err)
	}
}

// fenceHistoryError checks a history of Admit calls for what a linearizable
// high-water mark guarantees. It relies only on real-time order, which the
// counter proves, and assumes nothing about the order of overlapping calls:
//   - a call is either admitted or rejected with a StaleTokenError carrying
//     its token and a higher mark;
//   - no call admits a token below one whose admission had returned before
//     the call began (no stale token admitted);
//   - a rejection reports a mark that some call admitting that token began
//     before the rejection returned, and that is not below any token whose
//     admission returned before the rejected call began;
//   - the final mark is the highest token ever presented, because nothing
//     can make that one stale.
func fenceHistoryError(calls []fenceCall, finalHighest int64) error {
	var admitted []fenceCall
	firstStart := map[int64]int64{} // admitted token -> earliest start of a call admitting it
	var maxToken int64
	for _, c := range calls {
		maxToken = max(maxToken, c.token)
		var stale *StaleTokenError
		switch {
		case c.err == nil:
			admitted = append(admitted, c)
			if s, ok := firstStart[c.token]; !ok || c.start < s {
				firstStart[c.token] = c.start
			}
		case errors.As(c.err, &stale):
			if stale.Token != c.token || stale.Highest <= c.token {
				return fmt.Errorf("Admit(%d) = %+v, want Token %d and Highest > Token", c.token, *stale, c.token)
			}
		default:
			return fmt.Errorf("Admit(%d) = %v, want nil or a *StaleTokenError", c.token, c.err)
		}
	}
	if finalHighest != maxToken {
		return fmt.Errorf("final Highest() = %d, want the highest token presented, %d", finalHighest, maxToken)
	}

	// doneMax[i] is the highest token among the i+1 admitted calls that
	// returned first.
	sort.Slice(admitted, func(i, j int) bool { return admitted[i].end < admitted[j].end })
	doneMax := make([]int64, len(admitted))
	for i, c := range admitted {
		doneMax[i] = c.token
		if i > 0 {
			doneMax[i] = max(doneMax[i], doneMax[i-1])
		}
	}
	// admittedBefore returns the highest token admitted by calls that
	// returned before seq, or 0.
	admittedBefore := func(seq int64) int64 {
		n := sort.Search(len(admitted), func(i int) bool { return admitted[i].end >= seq })
		if n == 0 {
			return 0
		}
		return doneMax[n-1]
	}

	for _, c := range calls {
		floor := admittedBefore(c.start)
		var stale *StaleTokenError
		if !errors.As(c.err, &stale) {
			if c.token < floor {
				return fmt.Errorf("Admit(%d) = nil, but %d had been admitted before the call began: stale token admitted",
					c.token, floor)
			}
			continue
		}
		if stale.Highest < floor {
			return fmt.Errorf("Admit(%d) rejected with Highest %d, but %d had been admitted before the call began",
				c.token, stale.Highest, floor)
		}
		if s, ok := firstStart[stale.Highest]; !ok || s > c.end {
			return fmt.Errorf("Admit(%d) rejected with Highest %d, which no call admitted before the rejection returned",
				c.token, stale.Highest)
		}
	}
	return nil
}

// TestFenceHistoryChecker shows that the checker of the concurrent tests is
// not vacuous: it accepts a valid history with overlapping calls and rejects
// each kind of violation.
func TestFenceHistoryChecker(t *testing.T) {
	t.Parallel()
	stale := func(token, highest int64) error { return &StaleTokenError{Token: token, Highest: highest} }
	tests := []struct {
		name    string
		calls   []fenceCall
		highest int64
		wantErr bool
	}{
		{"valid, overlapping calls in either order", []fenceCall{
			{token: 5, start: 1, end: 4},
			{token: 4, start: 2, end: 3}, // overlaps 5: may linearize first
			{token: 5, start: 5, end: 6}, // equal admitted
			{token: 3, start: 7, end: 8, err: stale(3, 5)},
			{token: 9, start: 9, end: 12},
			{token: 8, start: 10, end: 11, err: stale(8, 9)}, // overlaps 9: may see it
		}, 9, false},
		{"stale token admitted", []fenceCall{
			{token: 5, start: 1, end: 2},
			{token: 4, start: 3, end: 4},
		}, 5, true},
		{"lost raise", []fenceCall{
			{token: 5, start: 1, end: 2},
		}, 4, true},
		{"rejection below an earlier admission", []fenceCall{
			{token: 9, start: 1, end: 2},
			{token: 7, start: 3, end: 6},
			{token: 5, start: 4, end: 5, err: stale(5, 7)},
		}, 9, true},
		{"rejection citing a token not yet admitted", []fenceCall{
			{token: 5, start: 1, end: 2, err: stale(5, 7)},
			{token: 7, start: 3, end: 4},
		}, 7, true},
		{"rejection of a token not below the mark", []fenceCall{
			{token: 7, start: 1, end: 2},
			{token: 7, start: 3, end: 4, err: stale(7, 7)},
		}, 7, true},
		{"unexpected error", []fenceCall{
			{token: 7, start: 1, end: 2, err: errors.New("boom")},
		}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := fenceHistoryError(tt.calls, tt.highest)
			if (err != nil) != tt.wantErr {
				t.Errorf("fenceHistoryError() = %v, want error: %v", err, tt.wantErr)
			}
		})
	}
}

func TestFenceAdmitConcurrent(t *testing.T) {
	t.Parallel()
	var f Fence
	calls := runFenceHistory(t, 8, 5000, f.Admit)
	checkFenceHistory(t, calls, f.Highest())
}

func TestFenceCRC16(t *testing.T) {
	t.Parallel()
	// The check value of CRC-16/XMODEM, and slots documented by Redis
	// (CLUSTER KEYSLOT and the cluster specification).
	if got := fenceCRC16("123456789"); got != 0x31C3 {
		t.Errorf("fenceCRC16(%q) = %#04x, want 0x31c3", "123456789", got)
	}
	for key, want := range map[string]uint16{
		"somekey":                 11058,
		"foo":                     12182,
		"foo{hash_tag}":           2515,
		"somethingelse{hash_tag}": 2515,
		"{user1000}.following":    fenceRefSlot("user1000"),
		"foo{}{bar}":              fenceRefSlot("foo{}{bar}"),
		"foo{{bar}}zap":           fenceRefSlot("{bar"),
		"foo{bar}{zap}":           fenceRefSlot("bar"),
	} {
		if got := fenceSlot(key); got != want {
			t.Errorf("fenceSlot(%q) = %d, want %d", key, got, want)
		}
	}
}

// fenceRefSlot is Redis's keyHashSlot (cluster.c), transcribed loop for
// loop, as a reference independent of fenceHashed.
func fenceRefSlot(key string) uint16 {
	var s, e int
	for s = 0; s < len(key); s++ {
		if key[s] == '{' {
			break
		}
	}
	if s == len(key) {
		return fenceCRC16(key) & 0x3FFF
	}
	for e = s + 1; e < len(key); e++ {
		if key[e] == '}' {
			break
		}
	}
	if e == len(key) || e == s+1 {
		return fenceCRC16(key) & 0x3FFF
	}
	return fenceCRC16(key[s+1:e]) & 0x3FFF
}

// fenceTestKeys returns every string over {'{', '}', 'a', 'b'} of length 1 to
// maxLen, plus keys seen in the wild and in the research notes.
func fenceTestKeys(maxLen int) []string {
	keys := []string{
		"orders:17", "user:{42}:balance", "{user1000}.following", "a{b}c", "}x", "{}", "{}x", "x{}", "{",
		"}", "{{}}", "}{a}", "x{}y{z}", "{a}}", "{}{a}", "foo{{bar}}zap", "redlock:fence:{abc}:abc",
		"ключ{данные}", "\x00{\xff}", strings.Repeat("k", 1000),
	}
	cur := []string{""}
	for range maxLen {
		var next []string
		for _, k := range cur {
			for _, c := range "{}ab" {
				next = append(next, k+string(c))
			}
		}
		keys = append(keys, next...)
		cur = next
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

func TestFenceMarkKeySharesSlot(t *testing.T) {
	t.Parallel()
	seen := map[string]string{} // mark key -> key
	for _, key := range fenceTestKeys(8) {
		mark := fenceMarkKey(key)
		if got, want := fenceRefSlot(mark), fenceRefSlot(key); got != want {
			t.Fatalf("fenceMarkKey(%q) = %q in slot %d, want slot %d", key, mark, got, want)
		}
		if fenceSlot(key) != fenceRefSlot(key) {
			t.Fatalf("fenceSlot(%q) = %d, want %d", key, fenceSlot(key), fenceRefSlot(key))
		}
		// The name must decode back to key: prefix, "{tag}", ":", key.
		rest, ok := strings.CutPrefix(mark, fenceMarkPrefix+"{")
		tag, back, ok2 := strings.Cut(rest, "}:")
		if !ok || !ok2 || back != key || tag == "" || strings.ContainsAny(tag, "}") {
			t.Fatalf("fenceMarkKey(%q) = %q, want %q + \"{tag}:\" + key", key, mark, fenceMarkPrefix)
		}
		if other, dup := seen[mark]; dup {
			t.Fatalf("fenceMarkKey(%q) = fenceMarkKey(%q) = %q", key, other, mark)
		}
		seen[mark] = key
	}
	// Keys with a usable tag keep it readable.
	for key, want := range map[string]string{
		"orders:17":         "redlock:fence:{orders:17}:orders:17",
		"user:{42}:balance": "redlock:fence:{42}:user:{42}:balance",
		"a{b}c":             "redlock:fence:{b}:a{b}c",
	} {
		if got := fenceMarkKey(key); got != want {
			t.Errorf("fenceMarkKey(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestFenceSlotTags(t *testing.T) {
	t.Parallel()
	tags := fenceSlotTags()
	for slot := range uint16(16384) {
		tag := fenceSlotTag(slot)
		if tag == "" || strings.ContainsAny(tag, "{}") || fenceCRC16(tag)&16383 != slot {
			t.Fatalf("fenceSlotTag(%d) = %q (n=%d), want a non-empty tag without braces in that slot", slot, tag, tags[slot])
		}
	}
	var maxN uint32
	for _, n := range tags {
		maxN = max(maxN, n)
	}
	t.Logf("slot tags scan %d integers", maxN+1)
}

func TestFenceMarkKeyClusterKeyslot(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--cluster-enabled", "yes")
	c := srv.Client(t)
	ctx := context.Background()
	keys := fenceTestKeys(5)
	pipe := c.Pipeline()
	keySlots := make([]*redis.IntCmd, len(keys))
	markSlots := make([]*redis.IntCmd, len(keys))
	for i, key := range keys {
		keySlots[i] = pipe.ClusterKeySlot(ctx, key)
		markSlots[i] = pipe.ClusterKeySlot(ctx, fenceMarkKey(key))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("CLUSTER KEYSLOT pipeline: %v", err)
	}
	for i, key := range keys {
		if got, want := keySlots[i].Val(), int64(fenceSlot(key)); got != want {
			t.Fatalf("CLUSTER KEYSLOT %q = %d, fenceSlot = %d", key, got, want)
		}
		if got, want := markSlots[i].Val(), keySlots[i].Val(); got != want {
			t.Fatalf("CLUSTER KEYSLOT %q = %d, want the slot of %q, %d", fenceMarkKey(key), got, key, want)
		}
	}
}

// TestRedisFenceOnCluster runs every operation on a one-node Redis Cluster
// owning all slots, which refuses a script whose keys are in two slots with
// CROSSSLOT.
func TestRedisFenceOnCluster(t *testing.T) {
	t.Parallel()
	g, err := NewRedisFence(startCluster(t))
	if err != nil {
		t.Fatalf("NewRedisFence: %v", err)
	}
	ctx := context.Background()
	for _, key := range []string{"}x", "{}", "a{b}c", "{", "}", "{}x", "x{}y{z}", "plain", "user:{7}"} {
		if err := g.Admit(ctx, key, 10); err != nil {
			t.Fatalf("Admit(%q, 10) = %v, want nil", key, err)
		}
		if err := g.Set(ctx, key, 10, "v", 0); err != nil {
			t.Fatalf("Set(%q, 10) = %v, want nil", key, err)
		}
		if err := g.Set(ctx, key, 9, "old", 0); !errors.Is(err, ErrStaleToken) {
			t.Fatalf("Set(%q, 9) = %v, want ErrStaleToken", key, err)
		}
		if err := g.Del(ctx, key, 11); err != nil {
			t.Fatalf("Del(%q, 11) = %v, want nil", key, err)
		}
		if err := g.HSet(ctx, key, "f", 12, "v"); err != nil {
			t.Fatalf("HSet(%q, 12) = %v, want nil", key, err)
		}
		if h, err := g.Highest(ctx, key); err != nil || h != 12 {
			t.Fatalf("Highest(%q) = %d, %v, want 12, nil", key, h, err)
		}
	}
}

// fenceBackends runs fn against miniredis and against a real redis-server.
func fenceBackends(t *testing.T, fn func(t *testing.T, c *redis.Client)) {
	t.Run("miniredis", func(t *testing.T) {
		mr := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		fn(t, c)
	})
	t.Run("redis-server", func(t *testing.T) {
		fn(t, redistest.Start(t).Client(t))
	})
}

func newTestRedisFence(t *testing.T, c Client) *RedisFence {
	t.Helper()
	g, err := NewRedisFence(c)
	if err != nil {
		t.Fatalf("NewRedisFence: %v", err)
	}
	return g
}

// checkFenceHighest fails the test unless key's mark is want.
func checkFenceHighest(t *testing.T, g *RedisFence, key string, want int64) {
	t.Helper()
	if h, err := g.Highest(context.Background(), key); err != nil || h != want {
		t.Fatalf("Highest(%q) = %d, %v, want %d, nil", key, h, err, want)
	}
}

// checkFenceGet fails the test unless key holds want ("" for a missing key).
func checkFenceGet(t *testing.T, c *redis.Client, key, want string) {
	t.Helper()
	got, err := c.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		got, err = "", nil
	}
	if err != nil || got != want {
		t.Fatalf("GET %q = %q, %v, want %q", key, got, err, want)
	}
}

func TestRedisFenceNilClient(t *testing.T) {
	t.Parallel()
	if g, err := NewRedisFence(nil); err == nil || g != nil {
		t.Errorf("NewRedisFence(nil) = %v, %v, want nil and an error", g, err)
	}
	if g, err := NewRedisFence((*redis.Client)(nil)); err == nil || g != nil {
		t.Errorf("NewRedisFence((*redis.Client)(nil)) = %v, %v, want nil and an error", g, err)
	}
	if g, err := NewRedisFence((*redis.ClusterClient)(nil)); err == nil || g != nil {
		t.Errorf("NewRedisFence((*redis.ClusterClient)(nil)) = %v, %v, want nil and an error", g, err)
	}
}

func TestRedisFenceSet(t *testing.T) {
	t.Parallel()
	fenceBackends(t, func(t *testing.T, c *redis.Client) {
		g := newTestRedisFence(t, c)
		ctx := context.Background()
		key := "fence-set"
		checkFenceHighest(t, g, key, 0)

		checkFenceOutcome(t, "Set(5)", g.Set(ctx, key, 5, "a", 0), fenceAdmitted, 5, 0)
		checkFenceGet(t, c, key, "a")
		checkFenceHighest(t, g, key, 5)

		checkFenceOutcome(t, "Set(5) again", g.Set(ctx, key, 5, "b", 0), fenceAdmitted, 5, 0)
		checkFenceGet(t, c, key, "b")
		checkFenceHighest(t, g, key, 5)

		checkFenceOutcome(t, "Set(4)", g.Set(ctx, key, 4, "stale", 0), fenceStale, 4, 5)
		checkFenceGet(t, c, key, "b")
		checkFenceHighest(t, g, key, 5)

		checkFenceOutcome(t, "Set(6)", g.Set(ctx, key, 6, 42, 0), fenceAdmitted, 6, 0)
		checkFenceGet(t, c, key, "42")
		checkFenceHighest(t, g, key, 6)
		checkFenceGet(t, c, g.MarkKey(key), "6")
	})
}

func TestRedisFenceAdmitRegisters(t *testing.T) {
	t.Parallel()
	fenceBackends(t, func(t *testing.T, c *redis.Client) {
		g := newTestRedisFence(t, c)
		ctx := context.Background()
		key := "fence-admit"
		// Holder 1 (token 3) writes; holder 2 (token 7) registers on entry
		// before reading; holder 1, paused in between, now writes late.
		checkFenceOutcome(t, "Set(3)", g.Set(ctx, key, 3, "v1", 0), fenceAdmitted, 3, 0)
		checkFenceOutcome(t, "Admit(7)", g.Admit(ctx, key, 7), fenceAdmitted, 7, 0)
		checkFenceHighest(t, g, key, 7)
		checkFenceGet(t, c, key, "v1") // Admit writes only the mark
		checkFenceOutcome(t, "late Set(3)", g.Set(ctx, key, 3, "lost update", 0), fenceStale, 3, 7)
		checkFenceOutcome(t, "Admit(3)", g.Admit(ctx, key, 3), fenceStale, 3, 7)
		checkFenceOutcome(t, "Admit(7) again", g.Admit(ctx, key, 7), fenceAdmitted, 7, 0)
		checkFenceOutcome(t, "Set(7)", g.Set(ctx, key, 7, "v2", 0), fenceAdmitted, 7, 0)
		checkFenceGet(t, c, key, "v2")
		checkFenceHighest(t, g, key, 7)

		// Admit on a key never written creates the mark only.
		checkFenceOutcome(t, "Admit(1) on a new key", g.Admit(ctx, "fence-admit-new", 1), fenceAdmitted, 1, 0)
		if n, err := c.Exists(ctx, "fence-admit-new").Result(); err != nil || n != 0 {
			t.Fatalf("EXISTS after Admit = %d, %v, want 0", n, err)
		}
		checkFenceHighest(t, g, "fence-admit-new", 1)
	})
}

func TestRedisFenceDelKeepsMark(t *testing.T) {
	t.Parallel()
	fenceBackends(t, func(t *testing.T, c *redis.Client) {
		g := newTestRedisFence(t, c)
		ctx := context.Background()
		key := "fence-del"
		checkFenceOutcome(t, "Set(5)", g.Set(ctx, key, 5, "v", 0), fenceAdmitted, 5, 0)
		checkFenceOutcome(t, "Del(4)", g.Del(ctx, key, 4), fenceStale, 4, 5)
		checkFenceGet(t, c, key, "v")
		checkFenceOutcome(t, "Del(6)", g.Del(ctx, key, 6), fenceAdmitted, 6, 0)
		checkFenceGet(t, c, key, "")
		checkFenceHighest(t, g, key, 6)
		// The superseded holder cannot bring the key back.
		checkFenceOutcome(t, "Set(5) after Del", g.Set(ctx, key, 5, "zombie", 0), fenceStale, 5, 6)
		checkFenceGet(t, c, key, "")
		checkFenceOutcome(t, "Del(6) of a missing key", g.Del(ctx, key, 6), fenceAdmitted, 6, 0)
		checkFenceOutcome(t, "Set(6) after Del", g.Set(ctx, key, 6, "back", 0), fenceAdmitted, 6, 0)
		checkFenceGet(t, c, key, "back")
	})
}

func TestRedisFenceHSet(t *testing.T) {
	t.Parallel()
	fenceBackends(t, func(t *testing.T, c *redis.Client) {
		g := newTestRedisFence(t, c)
		ctx := context.Background()
		key := "fence-hset"
		checkFenceOutcome(t, "HSet(f, 5)", g.HSet(ctx, key, "f", 5, "a"), fenceAdmitted, 5, 0)
		checkFenceOutcome(t, "HSet(g, 5)", g.HSet(ctx, key, "g", 5, 7), fenceAdmitted, 5, 0)
		checkFenceOutcome(t, "HSet(h, 4)", g.HSet(ctx, key, "h", 4, "stale"), fenceStale, 4, 5)
		checkFenceOutcome(t, "HSet(f, 6)", g.HSet(ctx, key, "f", 6, "b"), fenceAdmitted, 6, 0)
		got, err := c.HGetAll(ctx, key).Result()
		if want := map[string]string{"f": "b", "g": "7"}; err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("HGETALL %q = %v, %v, want %v", key, got, err, want)
		}
		checkFenceHighest(t, g, key, 6)

		// A string key: WRONGTYPE, and the mark stays where it was.
		checkFenceOutcome(t, "Set(6) on a string key", g.Set(ctx, "fence-hset-str", 6, "s", 0), fenceAdmitted, 6, 0)
		err = g.HSet(ctx, "fence-hset-str", "f", 9, "v")
		if err == nil || errors.Is(err, ErrStaleToken) || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("HSet on a string key = %v, want a WRONGTYPE error", err)
		}
		checkFenceHighest(t, g, "fence-hset-str", 6)
	})
}

func TestRedisFenceSetTTL(t *testing.T) {
	t.Parallel()
	fenceBackends(t, func(t *testing.T, c *redis.Client) {
		g := newTestRedisFence(t, c)
		ctx := context.Background()
		key := "fence-ttl"
		pttl := func() time.Duration {
			t.Helper()
			d, err := c.PTTL(ctx, key).Result()
			if err != nil {
				t.Fatalf("PTTL: %v", err)
			}
			return d
		}
		checkFenceOutcome(t, "Set(ttl 10s)", g.Set(ctx, key, 1, "v", 10*time.Second), fenceAdmitted, 1, 0)
		if d := pttl(); d <= 9*time.Second || d > 10*time.Second {
			t.Fatalf("PTTL after Set with ttl 10s = %v, want in (9s, 10s]", d)
		}
		checkFenceOutcome(t, "Set(KeepTTL)", g.Set(ctx, key, 1, "w", redis.KeepTTL), fenceAdmitted, 1, 0)
		if d := pttl(); d <= 9*time.Second || d > 10*time.Second {
			t.Fatalf("PTTL after Set with KeepTTL = %v, want in (9s, 10s]", d)
		}
		checkFenceGet(t, c, key, "w")
		checkFenceOutcome(t, "Set(ttl 0)", g.Set(ctx, key, 1, "x", 0), fenceAdmitted, 1, 0)
		if d := pttl(); d != -1 {
			t.Fatalf("PTTL after Set with ttl 0 = %v, want -1 (no expiry)", d)
		}
		checkFenceOutcome(t, "Set(ttl 1µs)", g.Set(ctx, "fence-ttl-short", 1, "x", time.Microsecond), fenceAdmitted, 1, 0)
		checkFenceOutcome(t, "Set(ttl -2s)", g.Set(ctx, key, 1, "y", -2*time.Second), fenceInvalid, 0, 0)
		checkFenceGet(t, c, key, "x")
		// The mark never expires.
		if d, err := c.PTTL(ctx, g.MarkKey(key)).Result(); err != nil || d != -1 {
			t.Fatalf("PTTL of the mark = %v, %v, want -1 (no expiry)", d, err)
		}
	})
}

func TestRedisFenceTokenPrecision(t *testing.T) {
	t.Parallel()
	fenceBackends(t, func(t *testing.T, c *redis.Client) {
		g := newTestRedisFence(t, c)
		ctx := context.Background()
		const base = int64(1_800_000_000_000_000) // server time in µs, 2027
		key := "fence-precision"
		checkFenceOutcome(t, "Set(base+1)", g.Set(ctx, key, base+1, "new", 0), fenceAdmitted, base+1, 0)
		checkFenceOutcome(t, "Set(base)", g.Set(ctx, key, base, "old", 0), fenceStale, base, base+1)
		checkFenceOutcome(t, "Admit(base)", g.Admit(ctx, key, base), fenceStale, base, base+1)
		checkFenceOutcome(t, "Set(base+1) again", g.Set(ctx, key, base+1, "again", 0), fenceAdmitted, base+1, 0)
		checkFenceGet(t, c, key, "again")
		checkFenceGet(t, c, g.MarkKey(key), "1800000000000001")
		checkFenceHighest(t, g, key, base+1)
		checkFenceOutcome(t, "Admit(base+2)", g.Admit(ctx, key, base+2), fenceAdmitted, base+2, 0)
		checkFenceGet(t, c, g.MarkKey(key), "1800000000000002")

		// The top of the range, where doubles are still exact.
		const top = int64(1) << 53
		key = "fence-precision-top"
		checkFenceOutcome(t, "Admit(2^53-1)", g.Admit(ctx, key, top-1), fenceAdmitted, top-1, 0)
		checkFenceOutcome(t, "Admit(2^53)", g.Admit(ctx, key, top), fenceAdmitted, top, 0)
		checkFenceOutcome(t, "Admit(2^53-1) after 2^53", g.Admit(ctx, key, top-1), fenceStale, top-1, top)
		checkFenceOutcome(t, "Admit(2^53+1)", g.Admit(ctx, key, top+1), fenceInvalid, 0, 0)
		checkFenceHighest(t, g, key, top)
	})
}

func TestRedisFenceInvalidInput(t *testing.T) {
	t.Parallel()
	fenceBackends(t, func(t *testing.T, c *redis.Client) {
		g := newTestRedisFence(t, c)
		ctx := context.Background()
		key := "fence-invalid"
		for _, token := range []int64{0, -1, -1 << 63, 1<<53 + 1, 1<<63 - 1} {
			name := fmt.Sprintf("(token %d)", token)
			checkFenceOutcome(t, "Admit"+name, g.Admit(ctx, key, token), fenceInvalid, 0, 0)
			checkFenceOutcome(t, "Set"+name, g.Set(ctx, key, token, "v", 0), fenceInvalid, 0, 0)
			checkFenceOutcome(t, "Del"+name, g.Del(ctx, key, token), fenceInvalid, 0, 0)
			checkFenceOutcome(t, "HSet"+name, g.HSet(ctx, key, "f", token, "v"), fenceInvalid, 0, 0)
		}
		checkFenceOutcome(t, `Admit("")`, g.Admit(ctx, "", 1), fenceInvalid, 0, 0)
		checkFenceOutcome(t, `Set("")`, g.Set(ctx, "", 1, "v", 0), fenceInvalid, 0, 0)
		checkFenceOutcome(t, `Del("")`, g.Del(ctx, "", 1), fenceInvalid, 0, 0)
		checkFenceOutcome(t, `HSet("")`, g.HSet(ctx, "", "f", 1, "v"), fenceInvalid, 0, 0)
		if _, err := g.Highest(ctx, ""); err == nil {
			t.Errorf(`Highest("") = nil error, want an error`)
		}
		if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
			t.Fatalf("DBSIZE after invalid calls = %d, %v, want 0", n, err)
		}

		// A mark key clobbered by someone else is an error, not a token.
		if err := c.Set(ctx, g.MarkKey(key), "not a number", 0).Err(); err != nil {
			t.Fatal(err)
		}
		checkFenceOutcome(t, "Set over a corrupt mark", g.Set(ctx, key, 5, "v", 0), fenceInvalid, 0, 0)
		checkFenceGet(t, c, key, "")
		if _, err := g.Highest(ctx, key); err == nil {
			t.Errorf("Highest with a corrupt mark = nil error, want an error")
		}
	})
}

func TestRedisFenceScriptFlush(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client(t)
	g := newTestRedisFence(t, c)
	ctx := context.Background()
	checkFenceOutcome(t, "Set(1)", g.Set(ctx, "fence-flush", 1, "a", 0), fenceAdmitted, 1, 0)
	srv.Do(t, "SCRIPT", "FLUSH")
	checkFenceOutcome(t, "Set(2) after SCRIPT FLUSH", g.Set(ctx, "fence-flush", 2, "b", 0), fenceAdmitted, 2, 0)
	checkFenceOutcome(t, "Set(1) after SCRIPT FLUSH", g.Set(ctx, "fence-flush", 1, "c", 0), fenceStale, 1, 2)
	checkFenceGet(t, c, "fence-flush", "b")
}

// TestRedisFenceAdmitConcurrent checks the history of concurrent Admit calls
// on a real server as TestFenceAdmitConcurrent does in process.
func TestRedisFenceAdmitConcurrent(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 8, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	g := newTestRedisFence(t, c)
	ctx := context.Background()
	calls := runFenceHistory(t, 8, 300, func(token int64) error { return g.Admit(ctx, "fence-race", token) })
	h, err := g.Highest(ctx, "fence-race")
	if err != nil {
		t.Fatalf("Highest: %v", err)
	}
	checkFenceHistory(t, calls, h)
}

// TestFencePausedHolder is Kleppmann's scenario on real servers: A holds the
// lock, reads the balance, and stalls (its goroutine blocked, as by a GC
// pause) past its lease. B takes the lock, reads, writes. A wakes and writes
// its stale computation. Unfenced, A's write lands and B's update is lost;
// through the RedisFence it is rejected. Run with Locker and Redlock tokens.
func TestFencePausedHolder(t *testing.T) {
	t.Parallel()
	storage := redistest.Start(t) // the resource: never one of the lock servers
	store := storage.Client(t)
	guard, err := NewRedisFence(store)
	if err != nil {
		t.Fatalf("NewRedisFence() = %v", err)
	}
	opts := []Option{WithTTL(300 * time.Millisecond), WithAutoRenew(false)}
	single := redistest.Start(t)
	lk := newLocker(t, single.Client(t), opts...)
	var clients []Client
	for _, s := range redistest.StartN(t, 3) {
		clients = append(clients, s.Client(t))
	}
	rl, err := NewRedlock(clients, opts...)
	if err != nil {
		t.Fatalf("NewRedlock() = %v", err)
	}
	t.Cleanup(func() { rl.Close() })

	for _, tc := range []struct {
		name string
		lk   acquirer
	}{{"Locker", lk}, {"Redlock", rl}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			fenced, plain := "balance:fenced:"+tc.name, "balance:plain:"+tc.name
			store.Set(ctx, fenced, 100, 0)
			store.Set(ctx, plain, 100, 0)
			read := func(key string) int {
				n, err := store.Get(ctx, key).Int()
				if err != nil {
					t.Fatalf("GET %s = %v", key, err)
				}
				return n
			}

			a, err := tc.lk.Lock(ctx, "account-"+tc.name)
			if err != nil {
				t.Fatalf("A Lock() = %v", err)
			}
			if err := guard.Admit(ctx, fenced, a.Token()); err != nil {
				t.Fatalf("A Admit() = %v", err)
			}
			aFenced, aPlain := read(fenced), read(plain)

			// A stalls here. Its lease runs out; B gets the lock.
			<-a.Done()
			b, err := tc.lk.Lock(ctx, "account-"+tc.name)
			if err != nil {
				t.Fatalf("B Lock() = %v", err)
			}
			if b.Token() <= a.Token() {
				t.Fatalf("B token %d, want > A token %d", b.Token(), a.Token())
			}
			if err := guard.Admit(ctx, fenced, b.Token()); err != nil {
				t.Fatalf("B Admit() = %v", err)
			}
			if err := guard.Set(ctx, fenced, b.Token(), read(fenced)+10, 0); err != nil {
				t.Fatalf("B fenced Set() = %v", err)
			}
			store.Set(ctx, plain, read(plain)+10, 0)

			// A wakes up and writes what it computed before the stall.
			store.Set(ctx, plain, aPlain-50, 0)
			err = guard.Set(ctx, fenced, a.Token(), aFenced-50, 0)
			var stale *StaleTokenError
			if !errors.Is(err, ErrStaleToken) || !errors.As(err, &stale) || stale.Highest != b.Token() {
				t.Errorf("A's stale fenced Set() = %v, want ErrStaleToken citing B's token %d", err, b.Token())
			}
			if got := read(plain); got != 50 {
				t.Errorf("unfenced balance = %d, want 50: A's stale write lands and B's +10 is lost", got)
			}
			if got := read(fenced); got != 110 {
				t.Errorf("fenced balance = %d, want 110 (B's write kept, A's rejected)", got)
			}
			b.Unlock(ctx)
		})
	}
}
