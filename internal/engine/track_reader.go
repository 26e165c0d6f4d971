package engine

import (
	"time"

	"github.com/redlockgo/redlock/internal/node"
)

// suspectReader reads the tracker's suspect locks through the core's
// verify, which loses those that are no longer ours and arms the others (a
// read on a data connection arms), and makes the locks that became held
// while armed suspect at ArmAfter of hold. Its run is one goroutine of the
// tracker's; wake and queue are safe for concurrent use. What it reads
// (suspect, arming, unarmed) is the tracker's, under the tracker's mu.
type suspectReader struct {
	t *Tracker
	// verify reads suspect locks, on via[node] where it is not nil (a data
	// connection) and through the pool elsewhere, and loses those that are
	// not ours; later says a lock is still being acquired, to be read once
	// it is held.
	verify func(locks []*Hold, via []node.Client) (later, failed []bool)
	kick   chan struct{} // buffered 1: suspects (or locks to arm) were added
}

// acquiringRecheck is how soon a lock that was suspect while still being
// acquired is looked at again.
const acquiringRecheck = 2 * time.Millisecond

// VerifyBatch bounds the locks read at once, one pipeline per node, when
// many are suspect or to be armed (a FLUSHALL or a reconnection under many
// holds): 10,000 held locks are 40 pipelines, one after the other.
const VerifyBatch = 256

func (r *suspectReader) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// queue adds l, which became held while armed, to the locks to arm at
// ArmAfter of hold.
func (r *suspectReader) queue(l *Hold) {
	t := r.t
	t.Mu.Lock()
	t.Arming = append(t.Arming, l)
	first := len(t.Arming)-t.ArmHead == 1
	t.Mu.Unlock()
	if first {
		r.wake() // run sets its timer for it
	}
}

// run reads suspect locks until Close, up to VerifyBatch at a time
// (one pipeline per node), and arms the locks in arming at ArmAfter of
// hold.
func (r *suspectReader) run() {
	t := r.t
	defer t.life.WG.Done()
	var batch []*Hold
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
			t.Mu.Lock()
			next := r.dueArming(time.Now().UnixNano())
			for l := range t.Suspect {
				if len(batch) == VerifyBatch {
					break
				}
				batch = append(batch, l)
				delete(t.Suspect, l)
			}
			t.Mu.Unlock()
			timer.Reset(next)
			if len(batch) == 0 || t.ctx.Err() != nil {
				break
			}
			t.Reads.Add(int64(len(batch)))
			via, down := t.readVia()
			later, failed := r.verify(batch, via)
			t.Mu.Lock()
			again := false
			for i, l := range batch {
				if !t.watching(l) {
					continue // released or lost while it was read: out of the book
				}
				if later[i] {
					t.Suspect[l] = struct{}{}
					again = true
				} else if down || failed[i] {
					// Read through the pool, or not read: not armed. The
					// keeper reads it again on the data connection.
					t.unarmed[l] = struct{}{}
				}
			}
			t.Mu.Unlock()
			if again {
				// Changed while its acquisition was on the way: read it once
				// it is held (or failed).
				time.AfterFunc(acquiringRecheck, r.wake)
				break
			}
		}
	}
}

// dueArming makes the locks of arming held for ArmAfter suspect (to be
// read, which arms them), drops those no longer held, and returns how long
// until the next is due (the tracker's mu held).
func (r *suspectReader) dueArming(now int64) time.Duration {
	t := r.t
	i := t.ArmHead
	next := time.Hour
	for ; i < len(t.Arming); i++ {
		l := t.Arming[i]
		if due := l.trk.heldAt.Load() + int64(ArmAfter); due > now {
			next = time.Duration(due - now)
			break
		}
		if l.trk.retired.Load() || !l.is(stateHeld) {
			continue // (heldNow comes just before the lock is held)
		}
		t.Suspect[l] = struct{}{}
	}
	clear(t.Arming[t.ArmHead:i])
	t.ArmHead = i
	if i == len(t.Arming) || i > len(t.Arming)/2 {
		n := copy(t.Arming, t.Arming[i:])
		clear(t.Arming[n:])
		t.Arming, t.ArmHead = t.Arming[:n], 0
	}
	return next
}
