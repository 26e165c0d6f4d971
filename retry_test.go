package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

func TestRetryHelpers(t *testing.T) {
	t.Parallel()
	assert.Negative(t, NoRetry()(0))
	lim := LimitRetry(ConstantRetry(time.Second), 3)
	assert.Equal(t, []time.Duration{time.Second, time.Second, -1, -1}, []time.Duration{lim(0), lim(1), lim(2), lim(3)})
	assert.Negative(t, LimitRetry(ConstantRetry(time.Second), 0)(0))
	assert.Equal(t, 7*time.Millisecond, LinearBackoff(7*time.Millisecond)(5))
	assert.Zero(t, ConstantRetry(-time.Second)(0))
}

func TestExponentialRetry(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	tests := []struct {
		lo, hi  time.Duration
		attempt int
		min     time.Duration // the draw is in [min, max]
		max     time.Duration
	}{
		{8 * ms, 100 * ms, 0, 8 * ms, 16 * ms},
		{8 * ms, 100 * ms, 1, 16 * ms, 32 * ms},
		{8 * ms, 100 * ms, 2, 32 * ms, 64 * ms},
		{8 * ms, 100 * ms, 3, 50 * ms, 100 * ms},
		{8 * ms, 100 * ms, 4, 50 * ms, 100 * ms},
		{8 * ms, 100 * ms, 1000, 50 * ms, 100 * ms},
		// bsm/redislock's reading: the first bound is a minimum.
		{100 * ms, 120 * ms, 0, 100 * ms, 120 * ms},
		{100 * ms, 120 * ms, 5, 100 * ms, 120 * ms},
		{10 * ms, 10 * ms, 3, 10 * ms, 10 * ms},
		{10 * ms, 5 * ms, 3, 10 * ms, 10 * ms},
		{0, 0, 2, 0, 0},
	}
	for _, tt := range tests {
		f := ExponentialRetry(tt.lo, tt.hi)
		for range 300 {
			if d := f(tt.attempt); d < tt.min || d > tt.max {
				t.Fatalf("ExponentialRetry(%v, %v)(%d) = %v, want in [%v, %v]", tt.lo, tt.hi, tt.attempt, d, tt.min, tt.max)
			}
		}
	}
	// Every wait of a long run stays in [lo, hi] (redislock's suite draws
	// 1,800 of them).
	f := ExponentialRetry(20*ms, 200*ms)
	for attempt := range 1800 {
		if d := f(attempt % 12); d < 20*ms || d > 200*ms {
			t.Fatalf("ExponentialRetry(20ms, 200ms)(%d) = %v, want in [20ms, 200ms]", attempt%12, d)
		}
	}
	if d := ConstantRetry(7 * time.Millisecond)(9); d != 7*time.Millisecond {
		t.Errorf("ConstantRetry(7ms)(9) = %v, want 7ms", d)
	}
}

// TestLimitRetryGivesUp: on a real server, Lock with LimitRetry makes n
// attempts and returns ErrNotObtained with the holder, long before its ctx
// ends; NoRetry makes one.
func TestLimitRetryGivesUp(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	holderLk := newLocker(t, srv.Client(t))
	held, err := holderLk.TryLock(ctx, "limited")
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		retry RetryFunc
		n     int
	}{
		{"NoRetry", NoRetry(), 1},
		{"LimitRetry", LimitRetry(ConstantRetry(10*time.Millisecond), 3), 3},
		{"MaxRetries", MaxRetries(ConstantRetry(10*time.Millisecond), 3), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &eventLog{}
			lk := newLocker(t, srv.Client(t), WithRetry(tc.retry), WithObserver(rec))
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := lk.Lock(lctx, "limited")
			require.ErrorIs(t, err, ErrNotObtained)
			require.NoError(t, lctx.Err(), "gave up before the ctx ended")
			var te *TakenError
			require.ErrorAs(t, err, &te)
			assert.Equal(t, held.Owner(), te.Owner)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			require.Len(t, rec.acquires, 1)
			assert.Equal(t, tc.n, rec.acquires[0].Attempts)
			assert.Equal(t, Contended, rec.acquires[0].Outcome)
		})
	}
	require.NoError(t, held.Unlock(ctx))
}

// TestRetryPolicyBoundsTrustedWait: a policy the caller chose bounds every
// wait, also once release messages are trusted (they only wake earlier):
// LimitRetry(LinearBackoff(100ms), 3) on a held lock gives up after about
// 0.2s of waits. Trusted sleeps used to replace its delay with 1s, 2s in
// all.
func TestRetryPolicyBoundsTrustedWait(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	held, err := newLocker(t, srv.Client(t)).TryLock(ctx, "bounded")
	require.NoError(t, err)
	// The call subscribes after its first refusal; from its second wait on,
	// with the subscription confirmed, it trusts release messages.
	lk := newLocker(t, srv.Client(t))
	start := time.Now()
	_, err = lk.Lock(ctx, "bounded", WithRetry(LimitRetry(LinearBackoff(100*time.Millisecond), 3)))
	elapsed := time.Since(start)
	require.ErrorIs(t, err, ErrNotObtained)
	t.Logf("gave up after %v", elapsed)
	// Two waits of 100ms; a trusted sleep would be 1s each. The bound is
	// loose for a loaded machine, and still far below one trusted sleep.
	assert.Less(t, elapsed, 900*time.Millisecond)
	require.NoError(t, held.Unlock(ctx))
}

// TestRetryWaitEndsWithHoldersLease: a policy given by WithRetry bounds
// every wait, but no wait lasts past the moment the holder's lease would
// expire (options.go, WithRetry; DESIGN.md "No waiter sleeps past the end
// of the holder's lease"). The holder crashed: it never releases (no
// release message comes) and nothing renews its 500ms lease. A Lock, an
// RLock and a Redlock's Lock that wait with ConstantRetry(time.Hour) get
// the name soon after that lease ends, within 3s (their ctx), which only a
// wait cut at the lease's end explains.
func TestRetryWaitEndsWithHoldersLease(t *testing.T) {
	t.Parallel()
	const lease, margin = 500 * time.Millisecond, 2500 * time.Millisecond
	for _, tc := range []struct {
		name    string
		masters int
		// crash leaves name held for lease by a holder that will never
		// release or renew it.
		crash func(t *testing.T, srvs []*redistest.Server, name string, lease time.Duration)
		wait  func(t *testing.T, ctx context.Context, srvs []*redistest.Server, name string) (*Lock, error)
	}{
		{"Lock after an abandoned Locker's lock", 1, crashedLocker, hourlyLock},
		{"Lock after a dead process's key", 1, deadKey, hourlyLock},
		{"RLock after an abandoned Locker's lock", 1, crashedLocker,
			func(t *testing.T, ctx context.Context, srvs []*redistest.Server, name string) (*Lock, error) {
				return newLocker(t, srvs[0].Client(t)).RLock(ctx, name, WithRetry(ConstantRetry(time.Hour)))
			}},
		{"Redlock.Lock after dead processes' keys", 3, deadKey,
			func(t *testing.T, ctx context.Context, srvs []*redistest.Server, name string) (*Lock, error) {
				clients := make([]Client, len(srvs))
				for i, srv := range srvs {
					clients[i] = srv.Client(t)
				}
				rl, err := NewRedlock(clients)
				require.NoError(t, err)
				t.Cleanup(func() { rl.Close() })
				return rl.Lock(ctx, name, WithRetry(ConstantRetry(time.Hour)))
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srvs := redistest.StartN(t, tc.masters)
			const name = "retry-capped"
			tc.crash(t, srvs, name, lease)
			heldAt := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), lease+margin)
			defer cancel()
			l, err := tc.wait(t, ctx, srvs, name)
			took := time.Since(heldAt)
			require.NoError(t, err, "%s: waiting call = %v after %v, want the name once the holder's %v lease ended", tc.name, err, took, lease)
			t.Logf("got the name %v after the crashed holder's %v lease began", took, lease)
			// Not at once: the holder's lease was there to wait for.
			assert.GreaterOrEqual(t, took, lease/2, "got the name %v after the holder's %v lease began", took, lease)
			require.NoError(t, l.Unlock(context.Background()))
		})
	}
}

// hourlyLock waits for name in Lock, from a Locker of its own, with a
// retry policy that sleeps an hour.
func hourlyLock(t *testing.T, ctx context.Context, srvs []*redistest.Server, name string) (*Lock, error) {
	return newLocker(t, srvs[0].Client(t)).Lock(ctx, name, WithRetry(ConstantRetry(time.Hour)))
}

// crashedLocker takes name for lease from a Locker of its own that never
// renews it and never releases it (the process crashed): no release
// message will come. Its Locker is closed when the test ends, long after
// the lease.
func crashedLocker(t *testing.T, srvs []*redistest.Server, name string, lease time.Duration) {
	t.Helper()
	_, err := newLocker(t, srvs[0].Client(t)).TryLock(context.Background(), name, WithTTL(lease), WithAutoRenew(false))
	require.NoError(t, err)
}

// deadKey writes name's lock key on every server for lease, as a holder
// process that died right after its grant leaves it.
func deadKey(t *testing.T, srvs []*redistest.Server, name string, lease time.Duration) {
	t.Helper()
	for _, srv := range srvs {
		require.NoError(t, srv.Client(t).Set(context.Background(), rlKey(name), "dead-process", lease).Err())
	}
}
