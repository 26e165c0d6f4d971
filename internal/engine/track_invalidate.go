package engine

import (
	"slices"
	"time"
)

// What the tracker makes of what its listeners hear (trackConn.run): an
// invalidation of a watched key is an own write's if a lock watching the
// key has a credit for it, else it makes the locks watching the key
// suspect. A FLUSHALL makes every held lock suspect; a lost listener drops
// every credit, and its new subscription makes every held lock suspect.

// invalidated takes node's invalidation of keys: one that a watching lock
// has a credit for is its own write's, after which the held locks watching
// the key are read again (armed: the write untracked it); any other makes
// every lock watching the key suspect.
func (t *Tracker) invalidated(node int, keys []string) {
	now := time.Now().UnixNano()
	t.Mu.Lock()
	defer t.Mu.Unlock()
	added := false
	// One write of a lock to several keys (a multi-name lock) comes in one
	// message, for one credit.
	spent := t.spent[:0]
	for _, k := range keys {
		if g, ok := t.ghosts[k]; ok {
			// A released lock's write first: its invalidation comes before
			// those of a lock taken after it.
			paid := g.take(node, now)
			if !g.live(now) {
				delete(t.ghosts, k)
			} else {
				t.ghosts[k] = g
			}
			if paid {
				if w, ok := t.watched[k]; ok && t.rearm(w) {
					added = true
				}
				continue
			}
		}
		w, ok := t.watched[k]
		if !ok {
			continue
		}
		if slices.Contains(spent, w.one) || slices.ContainsFunc(w.more, func(l *Hold) bool { return slices.Contains(spent, l) }) {
			continue
		}
		if l := t.spend(w, node, now); l != nil {
			spent = append(spent, l)
			if w, ok = t.watched[k]; ok && t.rearm(w) {
				added = true
			}
			continue
		}
		if now-t.dataConnected.Load() < int64(creditFor) {
			// Possibly an own renewal that a data connection given up on
			// (timed out) still sent, heard by its successor: read all
			// the same, but not counted as an outside change.
			t.AfterConnect.Add(1)
		} else {
			t.Outside.Add(1)
		}
		t.Suspect[w.one] = struct{}{}
		for _, l := range w.more {
			t.Suspect[l] = struct{}{}
		}
		added = true
	}
	clear(spent)
	t.spent = spent[:0]
	if added {
		t.reader.wake()
	}
}

// spend takes one credit of node from a lock of w and returns that lock,
// nil if none has one. A retired lock goes once it has none left, or they
// lapsed (t.mu held).
func (t *Tracker) spend(w watchers, node int, now int64) *Hold {
	var got *Hold
	var gone []*Hold
	for l := range w.all {
		if got == nil && l.trk.spend(node, now) {
			got = l
		}
		if l.trk.retired.Load() && !l.trk.live(now) {
			gone = append(gone, l)
		}
	}
	for _, l := range gone {
		t.unwatchLocked(l)
	}
	return got
}

// rearm makes the held locks of w that are not being released suspect,
// and reports whether there were any (t.mu held).
func (t *Tracker) rearm(w watchers) bool {
	any := false
	for l := range w.all {
		if l.trk.heldAt.Load() != 0 && !l.trk.retired.Load() {
			t.Suspect[l] = struct{}{}
			any = true
		}
	}
	return any
}

// suspectAll makes every held lock suspect.
func (t *Tracker) suspectAll() {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	for _, w := range t.watched {
		t.Suspect[w.one] = struct{}{}
		for _, l := range w.more {
			t.Suspect[l] = struct{}{}
		}
	}
	clear(t.unarmed)
	if len(t.Suspect) > 0 {
		t.reader.wake()
	}
}

// forgetCredits drops every watched lock's credits: their invalidations may
// never come.
func (t *Tracker) forgetCredits() {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	clear(t.ghosts)
	for _, w := range t.watched {
		w.one.trk.credits.Store(0)
		for _, l := range w.more {
			l.trk.credits.Store(0)
		}
	}
}
