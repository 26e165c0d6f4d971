package redlocktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redlockgo/redlock"
	"github.com/redlockgo/redlock/internal/redistest"
	"github.com/redlockgo/redlock/redlocktest"
)

func TestMain(m *testing.M) {
	redistest.QuietGoRedis()
	goleak.VerifyTestMain(m)
}

func TestExpireStealFail(t *testing.T) {
	lk, srv := redlocktest.NewLocker(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		breaks func(l *redlock.Lock)
		reason redlock.LossReason
	}{
		{"expire", srv.Expire, redlock.LossDeleted},
		{"steal", func(l *redlock.Lock) { srv.Steal(l, time.Minute) }, redlock.LossTaken},
		{"fail", func(*redlock.Lock) { srv.Fail(true) }, redlock.LossExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer srv.Fail(false)
			l, err := lk.TryLock(ctx, "job-"+tc.name)
			require.NoError(t, err)
			assert.Equal(t, l.Owner(), srv.Holder("job-"+tc.name))
			tc.breaks(l)
			err = redlocktest.WaitLost(t, l, 5*time.Second)
			require.ErrorIs(t, err, redlock.ErrLost)
			require.ErrorIs(t, err, tc.reason)
		})
	}
}

func TestDoSeesSteal(t *testing.T) {
	lk, srv := redlocktest.NewLocker(t)
	other := srv.NewLocker(t)
	ctx := context.Background()
	err := lk.Do(ctx, "report", func(ctx context.Context) error {
		l, _ := redlock.FromContext(ctx)
		srv.Steal(l, time.Minute)
		<-ctx.Done()
		return context.Cause(ctx)
	})
	require.ErrorIs(t, err, redlock.LossTaken)
	_, err = other.TryLock(ctx, "report")
	var te *redlock.TakenError
	require.True(t, errors.As(err, &te), "TryLock() = %v", err)
}
