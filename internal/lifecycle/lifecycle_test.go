package lifecycle

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newLife() *Life { return &Life{Closing: make(chan struct{}), Idle: make(chan func())} }

// goID is the id of the calling goroutine, from its stack's first line.
func goID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return string(bytes.Fields(buf)[1])
}

// run counts a call and runs it with lc.Go, as the engine does.
func run(t *testing.T, lc *Life, f func()) {
	t.Helper()
	require.True(t, lc.GoCount(1))
	lc.Go(func() {
		defer lc.WG.Done()
		f()
	})
}

// A call never waits for a busy worker: calls that block until all of them
// run must each get a goroutine (a fan-out waits for all its calls).
func TestGoNeverQueuesBehindABusyCall(t *testing.T) {
	lc := newLife()
	const n = 8
	var started sync.WaitGroup
	started.Add(n)
	release := make(chan struct{})
	for range n {
		run(t, lc, func() {
			started.Done()
			<-release
		})
	}
	done := make(chan struct{})
	go func() { started.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("not every call started while the others were running")
	}
	close(release)
	close(lc.Closing)
	lc.Stop()
	lc.WG.Wait()
}

// A call made after the last one ended runs on the goroutine that ran it:
// the worker keeps the stack the call grew.
func TestGoReusesAnIdleWorker(t *testing.T) {
	lc := newLife()
	ids := make(chan string, 1)
	run(t, lc, func() { ids <- goID() })
	first := <-ids
	reused := false
	// The worker waits for the next call once the last one has returned;
	// a call made before that gets a goroutine of its own. Bounded.
	for range 1000 {
		run(t, lc, func() { ids <- goID() })
		if <-ids == first {
			reused = true
			break
		}
	}
	require.True(t, reused, "no call ran on the worker of the first one")
	close(lc.Closing)
	lc.Stop()
	lc.WG.Wait()
}

// Idle workers end when Close begins (Closing), so that Close's wait for
// the core's goroutines returns at once, and on their own after workerIdle.
func TestIdleWorkersEnd(t *testing.T) {
	t.Run("at Close", func(t *testing.T) {
		lc := newLife()
		for range 4 {
			done := make(chan struct{})
			run(t, lc, func() { close(done) })
			<-done
		}
		close(lc.Closing)
		lc.Stop()
		waited := make(chan struct{})
		go func() { lc.WG.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(workerIdle / 2):
			t.Fatal("an idle worker outlived Close")
		}
		require.False(t, lc.GoCount(1))
		// Stopped: a call still runs, on a goroutine of its own.
		done := make(chan struct{})
		lc.Go(func() { close(done) })
		<-done
	})
	t.Run("after workerIdle", func(t *testing.T) {
		lc := newLife()
		done := make(chan struct{})
		run(t, lc, func() { close(done) })
		<-done
		waited := make(chan struct{})
		go func() { lc.WG.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(workerIdle + 10*time.Second):
			t.Fatal("an idle worker did not end on its own")
		}
	})
	t.Run("without Idle", func(t *testing.T) {
		lc := &Life{Closing: make(chan struct{})}
		done := make(chan struct{})
		lc.Go(func() { close(done) })
		<-done
		lc.WG.Wait() // no worker was counted
	})
}
