package engine

import "time"

// How long a channel stays subscribed once nobody of this core waits for its
// name: IdleGrace after its last waiter left and this core stopped holding
// it.

// idle is called when this core stops holding the lock of channel.
func (ws *waiters) idle(channel string) {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	for _, suffix := range queueSuffixes {
		if q := ws.queueOf(channel, suffix); q != nil && len(q.List) == 0 {
			ws.dropIfIdle(QueueKey(channel, suffix), q)
		}
	}
}

// IdleGrace is how long a channel stays subscribed after nobody of this core
// waits for or holds its name. A process that takes the same lock again soon
// (a worker loop) would otherwise pay an UNSUBSCRIBE and a SUBSCRIBE per
// critical section.
const IdleGrace = 2 * time.Second

// dropIfIdle marks a channel nobody waits on as idle, unless this core holds
// the name (a goroutine of ours is likely to want it next); the sweep
// unsubscribes it once idle for IdleGrace. Called under ws.mu.
func (ws *waiters) dropIfIdle(qk string, q *waitQueue) {
	if ws.held.has(heldKey(channelOf(qk))) {
		return
	}
	q.idleSince = time.Now()
	if ws.sweep == nil && !ws.closed {
		ws.sweep = time.AfterFunc(IdleGrace, ws.sweepIdle)
	}
}

// sweepIdle unsubscribes the channels idle for IdleGrace, and re-arms itself
// for the next one.
func (ws *waiters) sweepIdle() {
	ws.Mu.Lock()
	defer ws.Mu.Unlock()
	ws.sweep = nil
	if ws.closed {
		return
	}
	now := time.Now()
	var next time.Duration
	for qk, q := range ws.Queues {
		if len(q.List) > 0 || q.idleSince.IsZero() {
			continue
		}
		if left := IdleGrace - now.Sub(q.idleSince); left > 0 {
			if next == 0 || left < next {
				next = left
			}
			continue
		}
		if ws.held.has(heldKey(channelOf(qk))) {
			q.idleSince = time.Time{}
			continue
		}
		delete(ws.Queues, qk)
		if !ws.otherQueues(qk) {
			ws.PS.Unsubscribe(channelOf(qk))
		}
	}
	if next > 0 {
		ws.sweep = time.AfterFunc(next, ws.sweepIdle)
	}
}
