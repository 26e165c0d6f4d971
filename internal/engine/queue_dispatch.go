package engine

import (
	"strings"

	"github.com/redlockgo/redlock/internal/scripts"
)

// What release messages do to the local queue: the waiters' side of the
// listener interface (internal/pubsub), which wakes the head of each queue or only
// the waiter a name was passed to, and the per-channel record (msgs,
// unclaimed, firm) by which a Lock call learns of a release that came while
// it was not queued yet.

// seq is how many release messages channel had so far (see missed).
func (ws *waiters) seq(channel string) uint64 {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	return ws.msgs[channel]
}

// Unsubscribed forgets channel's messages once a node confirmed its
// UNSUBSCRIBE (listener), unless a Lock call joined a queue of the channel
// since, whose subscription the confirmation does not end.
func (ws *waiters) Unsubscribed(channel string) {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	for _, suffix := range queueSuffixes {
		if ws.queueOf(channel, suffix) != nil {
			return
		}
	}
	delete(ws.msgs, channel)
	delete(ws.unclaimed, channel)
	delete(ws.firm, channel)
}

// MissedAll counts a message on every channel: the connections are
// re-homed, and a release in between may have been heard by nobody, so a
// Lock call between its count and its joining looks again (listener).
func (ws *waiters) MissedAll() {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	for ch := range ws.msgs {
		ws.msgs[ch]++
	}
	clear(ws.unclaimed)
}

// Moved wakes the head of every queue of channel, subscribed again where
// its slot lives now: a release in between was heard by nobody
// (listener).
func (ws *waiters) Moved(channel string) {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	for _, suffix := range queueSuffixes {
		if q := ws.queueOf(channel, suffix); q != nil {
			q.wakeHead()
		}
	}
}

// ConnDown wakes every head: a connection went down, and heads sleeping
// until a lease ends, trusting messages that may now be lost, go back to
// polling (listener).
func (ws *waiters) ConnDown() { ws.wakeHeads() }

// Dispatch wakes the head waiter of every queue of channel for a release of
// owner. A release that passed the name to a queued writer ("w:<id>", see
// pass in _lib.lua) wakes only the waiter with that id, if it is ours, even
// when it is not the head of our queue (the server's queue keeps arrival
// order across processes, which can differ from ours when several calls
// found the name taken at once): the name is reserved for it, and nobody
// else could take it.
func (ws *waiters) Dispatch(channel, owner string) { ws.dispatch(channel, owner, false) }

// dispatch is Dispatch; own is a release by a holder of this core
// (Core.wakeOwn), which frees the name whoever a refused attempt last found
// holding it. That record can be stale: an attempt refused by one holder of
// ours may report it after that holder's release, and the name may have
// passed to another goroutine of ours since (a hand-off, or the woken head's
// attempt). A release of ours that then frees the name publishes nothing
// when nobody marked it waited for, so the wake-up from here is the only
// one: skipped, the head would sleep until its timer.
func (ws *waiters) dispatch(channel, owner string, own bool) {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	if id, ok := strings.CutPrefix(owner, scripts.PassedPrefix); ok {
		// Only a holder's release passes the name on: whoever held it
		// firmly is gone.
		delete(ws.firm, channel)
		if !ws.notifyID(channel, id) {
			ws.unclaimed[channel] = id
		}
		return
	}
	switch firm := ws.firm[channel]; {
	case firm == "":
	case firm != owner && !own:
		return // cannot free a quorum: the firm holder still has one
	default:
		delete(ws.firm, channel)
	}
	for _, suffix := range queueSuffixes {
		if q := ws.queueOf(channel, suffix); q != nil {
			q.wakeFor(owner)
		}
	}
	// Counted only on a channel this process waits on: its count lives
	// from the Join that made its first queue until it is unsubscribed with
	// none left (Unsubscribed), and only a Lock call that found it
	// subscribed compares (missed). An own release of a name nobody here
	// waited for leaves nothing: it used to leave a count per name, for
	// good.
	if _, ok := ws.msgs[channel]; ok {
		ws.msgs[channel]++
	}
}

// Channels is how many channels the waiters keep a record of (counts,
// unclaimed passes, firm holders): for tests.
func (ws *waiters) Channels() int {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	return len(ws.msgs) + len(ws.unclaimed) + len(ws.firm)
}

// wakeFor wakes the head of q for a release of owner, unless it woke for
// that release already: a Redlock's N copies of one release wake it once
// (ws.mu held).
func (q *waitQueue) wakeFor(owner string) {
	if len(q.List) == 0 || owner == q.lastOwner {
		return
	}
	q.lastOwner = owner
	notify(q.List[0])
}

// notifyID wakes the waiter of channel's writers queue whose id is id, and
// reports whether it is ours. Under ws.mu.
func (ws *waiters) notifyID(channel, id string) bool {
	if q := ws.Queues[channel]; q != nil {
		for _, w := range q.List {
			if w.WID == id {
				notify(w)
				return true
			}
		}
	}
	return false
}

// heldBy records what the latest refused attempt on channel found: the
// owner holding the name on a quorum of nodes, or "" when none did (the
// name split between contenders, reserved, or held by read holds).
func (ws *waiters) heldBy(channel, owner string) {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	if owner == "" {
		delete(ws.firm, channel)
		return
	}
	ws.firm[channel] = owner
}

// reservedFor wakes the waiter of channel's writers queue that the name is
// reserved for, when an attempt found it so (holder "queued:<id>") and the
// waiter is ours: its wake-up message may have come before its
// subscription, and a waiter that is not the head of its queue has no timer
// to find out by; the name would stay reserved for nobody until it lapses.
func (ws *waiters) reservedFor(channel, holder string) {
	id, ok := strings.CutPrefix(holder, scripts.ReservedPrefix)
	if !ok {
		return
	}
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	_ = ws.notifyID(channel, id)
}

func (ws *waiters) wakeHeads() {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	for _, q := range ws.Queues {
		q.wakeHead()
	}
}

// missed reports whether, since listening returned seq, a release message
// for channel woke every head, or one passed the name to id: one that came
// while the caller, just refused, was not in the queue yet, so nobody woke
// for it.
func (ws *waiters) missed(channel string, seq uint64, id string) bool {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	if id != "" && ws.unclaimed[channel] == id {
		delete(ws.unclaimed, channel)
		return true
	}
	return ws.msgs[channel] != seq
}
