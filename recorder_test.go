package redlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlockgo/redlock/internal/history"
)

// recorder feeds the locks of a test into a history.Recorder: each
// acquisition, its final Until, its release call, and when its Done closed
// (the exact moment, read from the lock, not when a goroutine noticed).
type recorder struct {
	*history.Recorder
	wg      sync.WaitGroup
	checked atomic.Bool // the test checked the history itself
}

// newRecorder returns a recorder whose goroutines are waited for before
// the test ends; every lock recorded must end by then (Close its Locker,
// or let the cleanups of newLocker do so: they run first). Unless the test
// checked the history itself (scene.check), the cleanup then fails the test
// on any violation.
func newRecorder(t testing.TB) *recorder {
	t.Helper()
	r := &recorder{Recorder: history.New()}
	t.Cleanup(func() {
		if !r.wait(10 * time.Second) {
			t.Errorf("recorder: a recorded lock was still held when the test ended")
			return
		}
		if !r.checked.Load() {
			if err := r.Err(); err != nil {
				t.Error(err)
			}
		}
	})
	return r
}

// acquired records l, taken by a call that returned at at, and watches its
// Done. It returns l's handle in the history.
func (r *recorder) acquired(l *Lock, at time.Time) *history.Acquisition {
	a := r.Acquired(l.Name(), l.Owner(), l.Token(), at, l.Until())
	r.wg.Go(func() {
		<-l.Done()
		closed := doneAt(l)
		r.Renewed(a, l.Until())
		r.DoneClosed(a, closed)
		if errors.Is(l.Err(), ErrLost) {
			r.Lost(a, closed)
		}
	})
	return a
}

// unlock records that the holder stopped relying on l, then unlocks it.
func (r *recorder) unlock(ctx context.Context, a *history.Acquisition, l *Lock) error {
	r.Released(a, time.Now())
	return l.Unlock(ctx)
}

// wait waits until every recorded lock has ended and been recorded, or d
// has passed; it reports whether they all ended.
func (r *recorder) wait(d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// fenced makes a fenced write with l's token through f, recording whether
// it was admitted.
func (r *recorder) fenced(f *Fence, l *Lock) error {
	return r.Fenced(l.Name(), l.Token(), func() error { return f.Admit(l.Token()) })
}

// doneAt is when l's Done closed (zero while it is open).
func doneAt(l *Lock) time.Time {
	l.ref().Mu.Lock()
	defer l.ref().Mu.Unlock()
	return l.ref().Ended
}
