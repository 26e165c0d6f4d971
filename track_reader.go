package redlock

import (
	"time"

	"github.com/redlockgo/redlock/internal/node"
)

// suspectReader reads the tracker's suspect locks through the core's
// verify, which loses those that are no longer ours and arms the others (a
// read on a data connection arms), and makes the locks that became held
// while armed suspect at armAfter of hold. Its run is one goroutine of the
// tracker's; wake and queue are safe for concurrent use. What it reads
// (suspect, arming, unarmed) is the tracker's, under the tracker's mu.
type suspectReader struct {
	t *tracker
	// verify reads suspect locks, on via[node] where it is not nil (a data
	// connection) and through the pool elsewhere, and loses those that are
	// not ours; later says a lock is still being acquired, to be read once
	// it is held.
	verify func(locks []*hold, via []node.Client) (later, failed []bool)
	kick   chan struct{} // buffered 1: suspects (or locks to arm) were added
}

// acquiringRecheck is how soon a lock that was suspect while still being
// acquired is looked at again.
const acquiringRecheck = 2 * time.Millisecond

// verifyBatch bounds the locks read at once, one pipeline per node, when
// many are suspect or to be armed (a FLUSHALL or a reconnection under many
// holds): 10,000 held locks are 40 pipelines, one after the other.
const verifyBatch = 256

func (r *suspectReader) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// queue adds l, which became held while armed, to the locks to arm at
// armAfter of hold.
func (r *suspectReader) queue(l *hold) {
	t := r.t
	t.mu.Lock()
	t.arming = append(t.arming, l)
	first := len(t.arming)-t.armHead == 1
	t.mu.Unlock()
	if first {
		r.wake() // run sets its timer for it
	}
}

// run reads suspect locks until Close, up to verifyBatch at a time
// (one pipeline per node), and arms the locks in arming at armAfter of
// hold.
func (r *suspectReader) run() {
	t := r.t
	defer t.life.WG.Done()
	var batch []*hold
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-r.kick:
		case <-timer.C:
		}
		for {
			batch = batch[:0]
			t.mu.Lock()
			next := r.dueArming(time.Now().UnixNano())
			for l := range t.suspect {
				if len(batch) == verifyBatch {
					break
				}
				batch = append(batch, l)
				delete(t.suspect, l)
			}
			t.mu.Unlock()
			timer.Reset(next)
			if len(batch) == 0 || t.ctx.Err() != nil {
				break
			}
			t.reads.Add(int64(len(batch)))
			via, down := t.readVia()
			later, failed := r.verify(batch, via)
			t.mu.Lock()
			again := false
			for i, l := range batch {
				if later[i] {
					t.suspect[l] = struct{}{}
					again = true
				} else if down || failed[i] {
					// Read through the pool, or not read: not armed. The
					// keeper reads it again on the data connection.
					t.unarmed[l] = struct{}{}
				}
			}
			t.mu.Unlock()
			if again {
				// Changed while its acquisition was on the way: read it once
				// it is held (or failed).
				time.AfterFunc(acquiringRecheck, r.wake)
				break
			}
		}
	}
}

// dueArming makes the locks of arming held for armAfter suspect (to be
// read, which arms them), drops those no longer held, and returns how long
// until the next is due (the tracker's mu held).
func (r *suspectReader) dueArming(now int64) time.Duration {
	t := r.t
	i := t.armHead
	next := time.Hour
	for ; i < len(t.arming); i++ {
		l := t.arming[i]
		if due := l.trk.heldAt.Load() + int64(armAfter); due > now {
			next = time.Duration(due - now)
			break
		}
		if l.trk.retired.Load() || !l.is(stateHeld) {
			continue // (heldNow comes just before the lock is held)
		}
		t.suspect[l] = struct{}{}
	}
	clear(t.arming[t.armHead:i])
	t.armHead = i
	if i == len(t.arming) || i > len(t.arming)/2 {
		n := copy(t.arming, t.arming[i:])
		clear(t.arming[n:])
		t.arming, t.armHead = t.arming[:n], 0
	}
	return next
}
