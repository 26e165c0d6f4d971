package redlocktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlockgo/redlock"
	"github.com/redlockgo/redlock/redlocktest"
)

// runJob is the code under test: it must stop, and say why, when its lock
// is lost.
func runJob(ctx context.Context, locker *redlock.Locker, started chan<- *redlock.Lock) error {
	return locker.Do(ctx, "nightly-job", func(ctx context.Context) error {
		lock, _ := redlock.FromContext(ctx)
		started <- lock
		<-ctx.Done() // the job's work, until the lock is lost
		return nil
	})
}

// A test of loss handling, as it reads inside a func TestXxx(t *testing.T):
// steal the lock while the job runs, and check that the job stops and
// reports why.
func ExampleNewLocker() {
	var t *testing.T // the test's t
	locker, srv := redlocktest.NewLocker(t)

	started := make(chan *redlock.Lock, 1)
	done := make(chan error, 1)
	go func() { done <- runJob(context.Background(), locker, started) }()
	srv.Steal(<-started, time.Minute)

	if err := <-done; !errors.Is(err, redlock.LossTaken) {
		t.Errorf("runJob() = %v, want a loss with reason LossTaken", err)
	}
}
