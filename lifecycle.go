package redlock

import (
	"sync"
	"time"
)

// lifecycle is what every part of the engine shares of its lifetime: the
// goroutines to wait for, and whether Close has begun or finished its I/O.
// The parts hold it instead of a pointer back to the core.
type lifecycle struct {
	wg      sync.WaitGroup // every goroutine of the core, including calls left behind on a paused node
	closing chan struct{}  // closed when Close starts: waiters give up
	mu      sync.Mutex
	// stopped: Close has released what it could; no goroutine may start,
	// so wg.Add never races the final wg.Wait.
	stopped bool
}

// goCount registers n goroutines, or reports false once Close has finished
// its I/O, so that wg.Add never races wg.Wait.
func (lc *lifecycle) goCount(n int) bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.stopped {
		return false
	}
	lc.wg.Add(n)
	return true
}

// isClosing reports whether Close has begun.
func (lc *lifecycle) isClosing() bool {
	select {
	case <-lc.closing:
		return true
	default:
		return false
	}
}

// stop marks Close's I/O done: no goroutine starts after it.
func (lc *lifecycle) stop() {
	lc.mu.Lock()
	lc.stopped = true
	lc.mu.Unlock()
}

// waitUntil waits for wg, or until deadline.
func waitUntil(wg *sync.WaitGroup, deadline time.Time) {
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
