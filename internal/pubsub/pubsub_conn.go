package pubsub

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// subConn is one pub/sub connection and the goroutine reading it.
type subConn struct {
	ps      *redis.PubSub
	s       *nodeSubs
	channel string        // a per-channel connection's channel, else ""
	sharded bool          // subscribed with SSUBSCRIBE
	stop    chan struct{} // closed when the connection is retired
	up      bool          // owned by the reading goroutine
	// moved: opened anew because the channel's slot moved (opReopen); its
	// first confirmation wakes the channel's waiters (Listener.Moved).
	moved bool
}

// receive reads one pub/sub connection until it is retired or Close.
func (ps *Conns) receive(sc *subConn) {
	defer ps.life.WG.Done()
	defer func() {
		if sc.up {
			ps.setUp(sc, false)
		}
		ps.down.Add(-1) // this connection no longer counts at all
	}()
	for {
		msg, err := sc.ps.Receive(context.Background())
		if err != nil {
			if !ps.readFailed(sc, err) {
				return
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			ps.subscription(sc, m)
		case *redis.Message:
			ps.setUp(sc, true)
			ps.sink.Dispatch(m.Channel, m.Payload)
		}
	}
}

// setUp records whether sc's last read succeeded, which ps.down counts.
// Called by sc's reader only.
func (ps *Conns) setUp(sc *subConn, v bool) {
	if v != sc.up {
		sc.up = v
		if v {
			ps.down.Add(-1)
		} else {
			ps.down.Add(1)
			// Heads sleeping until a lease ends, trusting messages that
			// may now be lost, go back to polling.
			ps.sink.ConnDown()
		}
	}
}

// readFailed handles a failed read of sc, and reports whether receive
// reads again; if not, sc is done with (retired, Close, or handed back to
// its node to open anew).
func (ps *Conns) readFailed(sc *subConn, err error) bool {
	ps.setUp(sc, false)
	var rerr redis.Error
	if sc.sharded && sc.channel != "" && errors.As(err, &rerr) {
		// The shard refused SSUBSCRIBE: the slot moved (MOVED), or the
		// server has no sharded pub/sub. Subscribe anew, after a pause
		// (nodeSubs.reopen).
		sc.s.push(subOp{kind: opReopen, channel: sc.channel, legacy: isUnknownCommand(err)})
		return false
	}
	// go-redis reconnects (and resubscribes) on the next call. Pause
	// briefly so a node that refuses connections is not dialled in a
	// tight loop.
	t := time.NewTimer(50 * time.Millisecond)
	select {
	case <-sc.stop:
		t.Stop()
		return false
	case <-ps.life.Closing:
		t.Stop()
		return false
	case <-t.C:
	}
	return true
}

// subscription handles a node's confirmation of a SUBSCRIBE or an
// UNSUBSCRIBE on sc, or its notice that a sharded channel moved away.
func (ps *Conns) subscription(sc *subConn, m *redis.Subscription) {
	if m.Kind == "sunsubscribe" && sc.channel != "" {
		// Not ours (a per-channel connection is closed, never
		// unsubscribed): the channel's slot moved to another shard,
		// which the server says this way. Releases meanwhile may be
		// missed: heads poll until the channel is subscribed where
		// it lives now.
		ps.setUp(sc, false)
		ps.mu.Lock()
		ps.heard[m.Channel] = max(ps.heard[m.Channel]-1, 0)
		ps.mu.Unlock()
		sc.s.push(subOp{kind: opReopen, channel: m.Channel})
		return
	}
	ps.setUp(sc, true)
	on := m.Kind == "subscribe" || m.Kind == "ssubscribe"
	ps.confirmed(m.Channel, on)
	if on && sc.moved {
		// A release published while the slot moved (after the old
		// shard said sunsubscribe, before this subscription) was
		// heard by nobody: the waiters look now rather than at
		// their next poll.
		sc.moved = false
		ps.sink.Moved(m.Channel)
	}
}

// isUnknownCommand reports the server's answer to a command it does not
// have ("ERR unknown command 'ssubscribe'..." before Redis 7.0).
func isUnknownCommand(err error) bool { return redis.HasErrorPrefix(err, "unknown command") }
