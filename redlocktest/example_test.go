package redlocktest_test

import (
	"context"
	"errors"
	"fmt"
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

// testRunJobStopsOnLoss is the body of a test of loss handling, as it reads
// in a func TestRunJob(t *testing.T): steal the lock while the job runs, and
// check that the job stops and reports why.
func testRunJobStopsOnLoss(t testing.TB) {
	locker, srv := redlocktest.NewLocker(t) // 1s lease renewed every 50ms

	started := make(chan *redlock.Lock, 1)
	done := make(chan error, 1)
	go func() { done <- runJob(context.Background(), locker, started) }()
	srv.Steal(<-started, time.Minute) // the next renewal finds another owner

	if err := <-done; !errors.Is(err, redlock.LossTaken) {
		t.Errorf("runJob() = %v, want a loss with reason LossTaken", err)
	}
}

func ExampleNewLocker() {
	t := &exampleT{} // in a real test: the test's *testing.T
	testRunJobStopsOnLoss(t)
	t.cleanup()
	fmt.Println("test passed:", !t.failed)
	// Output:
	// test passed: true
}

// exampleT stands in for a *testing.T so that the example runs: it records
// failures and runs cleanups. Only the methods below are called; the
// embedded testing.TB is nil.
type exampleT struct {
	testing.TB
	failed   bool
	cleanups []func()
}

func (t *exampleT) Helper()             {}
func (t *exampleT) Cleanup(f func())    { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Logf(string, ...any) {}

func (t *exampleT) Errorf(format string, args ...any) {
	t.failed = true
	fmt.Printf(format+"\n", args...)
}

func (t *exampleT) Fatalf(format string, args ...any) {
	t.Errorf(format, args...)
	panic("test failed")
}

// cleanup runs the registered cleanups, last first, as the testing package
// does when a test ends.
func (t *exampleT) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
