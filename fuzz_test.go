package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/history"
)

// fuzzMaxOps bounds one input's operation sequence, and fuzzMaxName its
// name, so that every input runs in milliseconds.
const (
	fuzzMaxOps  = 48
	fuzzMaxName = 300
)

// FuzzLocker runs a sequence of operations (acquire, extend, release,
// Close, fenced writes, pauses) decoded from ops, on two names derived from
// name, with a TTL of 5-1028ms, through two Lockers on their own clients of
// one miniredis, and checks the history:
// no overlapping holders, tokens increasing, no stale write admitted, Done
// closed before the next owner acquired. Bad input (an empty name) must
// give errors, never a panic. Run with go test -fuzz=FuzzLocker; the seed
// corpus in testdata/fuzz/FuzzLocker runs with every go test.
//
// miniredis's keys do not expire here: leases still run out on the client
// (Until, Done, Err), and the name changes hands by Unlock (of a live or a
// lost lock), Close and hand-offs, but never because the server's clock
// passed a TTL. A server clock that expired keys a few milliseconds after
// their TTL would make the checker judge the machine's scheduling (a loss
// clock delayed past a 5ms lease) instead of the operation sequences; and
// miniredis's clock can only be moved in steps, which to a lease looks like
// a clock jump. Takeovers at expiry are tested on real servers
// (TestSafety*, TestLossClockScales; see SAFETY.md).
//
// Each byte of ops is one operation: the low 3 bits choose it, the high 5
// bits its argument (which Locker, which held lock, how long).
func FuzzLocker(f *testing.F) {
	f.Add("job", uint16(40), []byte{0, 8, 4, 2, 3, 0, 14, 0})
	f.Fuzz(func(t *testing.T, name string, ttlMs uint16, ops []byte) {
		if len(name) > fuzzMaxName {
			name = name[:fuzzMaxName]
		}
		if len(ops) > fuzzMaxOps {
			ops = ops[:fuzzMaxOps]
		}
		fuzzLocker(t, name, time.Duration(5+ttlMs%1024)*time.Millisecond, ops)
	})
}

func fuzzLocker(t *testing.T, name string, ttl time.Duration, ops []byte) {
	mr := miniredis.RunT(t)
	rec := history.New()
	ctx := context.Background()

	type held struct {
		l *Lock
		a *history.Acquisition
	}
	var (
		lockers [2]*Locker
		clients [2]*redis.Client
		locks   []held
		fence   Fence
		r       = &recorder{Recorder: rec}
	)
	open := func(i int) {
		clients[i] = redis.NewClient(&redis.Options{Addr: mr.Addr()})
		lk, err := NewLocker(clients[i], WithTTL(ttl), WithRetry(ConstantRetry(time.Millisecond)))
		if err != nil {
			// TTLs here are all valid: a constructor error is a bug.
			t.Fatalf("NewLocker(TTL %v) = %v", ttl, err)
		}
		lockers[i] = lk
	}
	closeLocker := func(i int) {
		if err := lockers[i].Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
		_ = clients[i].Close()
	}
	open(0)
	open(1)
	defer func() {
		closeLocker(0)
		closeLocker(1)
		if !r.wait(5 * time.Second) {
			t.Errorf("a lock's Done still open 5s after its Locker closed")
		}
		if err := rec.Err(); err != nil {
			t.Errorf("name %q, TTL %v, ops %v:\n%v", name, ttl, ops, err)
		}
	}()

	names := [2]string{name, name + "/2"}
	acquire := func(l *Lock, err error, at time.Time, n string) {
		switch {
		case err == nil:
			locks = append(locks, held{l, r.acquired(l, at)})
		case n == "":
			// An empty name is refused, not taken.
		case errors.Is(err, ErrNotObtained):
		default:
			t.Errorf("acquire %q = %v, want nil or ErrNotObtained", n, err)
		}
	}
	pick := func(arg int) (held, bool) {
		if len(locks) == 0 {
			return held{}, false
		}
		return locks[arg%len(locks)], true
	}
	for _, op := range ops {
		arg := int(op >> 3)
		lk := lockers[arg%2]
		n := names[(arg>>1)%2]
		switch op & 7 {
		case 0: // TryLock
			l, err := lk.TryLock(ctx, n)
			acquire(l, err, time.Now(), n)
		case 1: // Lock, bounded
			lctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			l, err := lk.Lock(lctx, n)
			cancel()
			acquire(l, err, time.Now(), n)
		case 2: // Extend
			if h, ok := pick(arg); ok {
				if err := h.l.Extend(ctx, ttl); err == nil {
					rec.Renewed(h.a, h.l.Until())
				}
			}
		case 3: // Unlock
			if h, ok := pick(arg); ok {
				err := r.unlock(ctx, h.a, h.l)
				if err != nil && !errors.Is(err, ErrNotHeld) {
					t.Errorf("Unlock() = %v", err)
				}
			}
		case 4: // fenced write by a holder who believes it holds the lock
			if h, ok := pick(arg); ok && h.l.Err() == nil {
				_ = r.fenced(&fence, h.l)
			}
		case 5: // Close a Locker, open a new one in its place
			closeLocker(arg % 2)
			open(arg % 2)
		case 6: // time passes
			time.Sleep(time.Duration(arg%16) * time.Millisecond)
		case 7: // TryLock without auto-renew: it runs out
			l, err := lk.TryLock(ctx, n, WithAutoRenew(false))
			acquire(l, err, time.Now(), n)
		}
	}
}
