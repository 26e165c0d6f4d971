// Package lifecycle is what every part of a Locker or Redlock shares of its
// lifetime: the goroutines that Close waits for, and whether Close has begun.
package lifecycle

import (
	"sync"
	"time"
)

// Life is what every part of the engine shares of its lifetime: the
// goroutines to wait for, and whether Close has begun or finished its I/O.
// The parts hold it instead of a pointer back to the core.
type Life struct {
	WG      sync.WaitGroup // every goroutine of the core, including calls left behind on a paused node
	Closing chan struct{}  // closed when Close starts: waiters give up
	mu      sync.Mutex
	// stopped: Close has released what it could; no goroutine may start,
	// so wg.Add never races the final wg.Wait.
	stopped bool
	// Idle hands a call to a worker goroutine waiting for one (Go); nil:
	// every call gets a goroutine of its own.
	Idle chan func()
}

// workerIdle is how long a worker goroutine waits for its next call before
// it ends.
const workerIdle = time.Second

// Go runs f, a goroutine already counted by GoCount, on a worker goroutine:
// one that ran an earlier call and waits for the next (for workerIdle, or
// until Close begins), else a new one. A worker keeps the stack its calls
// grew (until the garbage collector shrinks an idle one): a go-redis call
// needs a deeper one than a goroutine starts with.
func (lc *Life) Go(f func()) {
	select {
	case lc.Idle <- f:
		return
	default:
	}
	if lc.Idle == nil || !lc.GoCount(1) {
		go f()
		return
	}
	go lc.work(f)
}

func (lc *Life) work(f func()) {
	defer lc.WG.Done()
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		f()
		f = nil // what the call kept reachable is not kept while idle
		t.Reset(workerIdle)
		select {
		case f = <-lc.Idle:
		case <-t.C:
			return
		case <-lc.Closing:
			return
		}
	}
}

// GoCount registers n goroutines, or reports false once Close has finished
// its I/O, so that wg.Add never races wg.Wait.
func (lc *Life) GoCount(n int) bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.stopped {
		return false
	}
	lc.WG.Add(n)
	return true
}

// IsClosing reports whether Close has begun.
func (lc *Life) IsClosing() bool {
	select {
	case <-lc.Closing:
		return true
	default:
		return false
	}
}

// Stop marks Close's I/O done: no goroutine starts after it.
func (lc *Life) Stop() {
	lc.mu.Lock()
	lc.stopped = true
	lc.mu.Unlock()
}

// WaitUntil waits for wg, or until deadline.
func WaitUntil(wg *sync.WaitGroup, deadline time.Time) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
