package redlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/pubsub"
)

// Observing an election: pushed by the server, never polled while all is
// well. An observer subscribes, on every node, to the election channel
// (announcements: a new leader, a Proclaim) and to the lock's release
// channel (release.lua publishes there in the same script that frees the
// name, so a resignation is heard exactly once it has taken effect; a
// separate message sent from Go would come before or after it). Each
// message makes it read the leader (one round trip) and pass on what
// changed. A leader that dies (kill -9) says nothing: the observer knows
// its lease from the last read and reads again when it would end, a timer
// per observer rather than polling, which a live leader's renewals push
// back each time. A (re)confirmed subscription is also read, since
// messages may have been missed while it was down.

// observeBuffer is how many changes a slow reader of Observe may fall
// behind before the oldest are dropped.
const observeBuffer = 16

// observeRetry is how long an observer that could not read the leader
// waits before it reads again. Only then does it poll: while it cannot
// tell, it has said so (Term 0).
const observeRetry = 250 * time.Millisecond

// expiryMargin is added to the leader's lease before the observer reads
// again: the key expires on the server's clock, which the read's round trip
// has moved on a little.
const expiryMargin = 2 * time.Millisecond

// Observe reports the election's leaders as they change, until ctx ends or
// the Locker or Redlock is closed; then the channel is closed. It sends the
// current leader first (nothing when there is none), then every change in
// the order it happened: a new leader (a larger Term), a new value of the
// same leader ([Election.Proclaim]: same Term), and the end of a
// leadership with no successor yet (Term 0) whether by resignation or by a
// lease that ran out. Changes are pushed by the server (pub/sub) and reach
// the channel within a round trip; a leader that dies without a word is
// reported when its lease ends. A leader that came and went before the
// observer could read it is still reported when its announcement was
// heard, with TTL 0, before its successor.
//
// Term 0 also means "cannot tell": when fewer than a quorum of the
// observer's pub/sub connections are up (a follower cut off from Redis),
// or a read fails (a silent link is found when the lease it last read
// ends), the observer sends a Leader with Term 0 at once and the current
// leader again once it has read it after reconnecting. Terms never go
// backwards on the channel except through such a 0, and the values of one
// term come in the order they were proclaimed, each once.
//
// A leader is what the server holds: an attempt that a quorum of masters
// granted and that then gave the lock up (its validity spent on a slow
// master, its caller's ctx ended) held the name for that while and may be
// reported, though its Campaign returned no lock and nothing was written
// with its term.
//
// The channel is buffered (16 changes). A reader that falls further behind
// loses the oldest changes, never the latest: Observe never blocks on its
// reader, and the last value received is always the last state observed.
//
// Each call opens one pub/sub connection per node (not shared with the
// Locker's own) and runs a goroutine per node plus one, all ended when ctx
// ends or at Close (a connection stuck dialling a server that does not
// answer ends by the client's own timeouts, as other calls left behind
// do; the channel is closed without waiting for it). An unusable Election
// (see [Locker.Election]), or one whose Locker is closed, gives a closed
// channel.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader, observeBuffer)
	if e.usable() != nil || ctx.Err() != nil || e.c.Life.IsClosing() || !e.c.Life.GoCount(len(e.c.Pool.Nodes)+1) {
		close(out)
		return out
	}
	o := &observer{
		e:      e,
		out:    out,
		events: make(chan observeEvent, 64),
		stop:   make(chan struct{}),
		up:     make([]bool, len(e.c.Pool.Nodes)),
		conns:  make([]*redis.PubSub, len(e.c.Pool.Nodes)),
	}
	for _, n := range e.c.Pool.Nodes {
		go o.receive(n)
	}
	go o.run(ctx)
	return out
}

// observer is one Observe call: the loop that reads and reports (run) and
// one reader per node's pub/sub connection (receive).
type observer struct {
	e      *Election
	out    chan Leader
	events chan observeEvent
	stop   chan struct{} // closed when run returns: readers end

	// Owned by run.
	up      []bool // per node: subscribed, and no read has failed since
	nUp     int
	sent    Leader // the last Leader sent (Term 0 at first: "none")
	highest int64  // the largest Term sent
	heard   heardValues
	timer   *time.Timer

	mu     sync.Mutex
	closed bool
	conns  []*redis.PubSub // per node, for run to close them
}

type observeEventKind uint8

const (
	eventUp      observeEventKind = iota // a node confirmed the subscription
	eventDown                            // a node's connection failed
	eventMessage                         // a message on either channel
)

type observeEvent struct {
	kind    observeEventKind
	node    int
	channel string
	payload string
}

// run is the observer's loop: it owns the state and is the only sender on
// out, so out is closed as soon as the loop returns. The connections are
// closed after it: PubSub.Close waits for a re-dial in progress (go-redis
// holds the PubSub's mutex through the new connection's handshake, up to
// the client's timeouts when the node does not answer), and the reader
// ranging over out must not wait with it. Close still waits for run, and so
// for that teardown, as for any goroutine of the core.
func (o *observer) run(ctx context.Context) {
	defer o.e.c.Life.WG.Done()
	defer o.shutdown()
	defer close(o.out)
	o.timer = time.NewTimer(time.Hour)
	o.timer.Stop()
	defer o.timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.e.c.Life.Closing:
			return
		case ev := <-o.events:
			anns, reread := o.take(ev)
			// Coalesce what is already queued into one read; the
			// announcements keep their order.
			for n := len(o.events); n > 0; n-- {
				a, r := o.take(<-o.events)
				anns, reread = append(anns, a...), reread || r
			}
			if reread {
				o.refresh(ctx, anns)
			}
		case <-o.timer.C:
			o.refresh(ctx, nil)
		}
	}
}

// take applies one event: the announcements it carries, and whether the
// leader must be read.
func (o *observer) take(ev observeEvent) (anns []Leader, reread bool) {
	switch ev.kind {
	case eventUp:
		if !o.up[ev.node] {
			o.up[ev.node] = true
			o.nUp++
		}
		return nil, true
	case eventDown:
		o.heard = heardValues{} // messages may be missed from here on
		if o.up[ev.node] {
			o.up[ev.node] = false
			o.nUp--
			if o.nUp < o.e.c.Pool.Quorum {
				o.send(Leader{}) // cannot tell until a quorum is back and read
			}
		}
		return nil, false
	}
	if ev.channel == o.e.elect {
		if a, n, ok := parseAnnouncement(ev.payload); ok {
			anns = append(anns, a)
			o.heard.note(a, n, ev.node)
		}
	}
	return anns, true
}

// heardValues orders the values announced for the latest term heard. On a
// Redlock a read can lag (a quorum that includes a master the last Proclaim
// has not reached yet); this order keeps it from putting an older value
// after a newer one. The order is the number the leader gives each
// announcement. From a leader of a release before the number it is when
// each Proclaim was first heard from any node (a Proclaim returns once a
// quorum has run it, so a later value is announced after an earlier one),
// and a value a node announces again is taken for a new Proclaim of it: a
// node that ran one Proclaim twice cannot be told apart then. Reset
// whenever a connection drops: then messages may be missed.
type heardValues struct {
	term   int64
	next   int
	order  map[string]int         // value -> when its latest Proclaim was first heard
	byNode map[int]map[string]int // node -> value -> the order it announced it at
	newest string
}

func (h *heardValues) note(a Leader, n int64, node int) {
	switch {
	case a.Term < h.term:
		return
	case a.Term > h.term || h.order == nil:
		*h = heardValues{term: a.Term, order: map[string]int{}, byNode: map[int]map[string]int{}}
	}
	if n > 0 {
		// Numbered by the leader: its order exactly, whichever master's
		// message comes first, and a message a master sent twice (it ran
		// the announcement twice) is one announcement.
		if i, ok := h.order[a.Value]; !ok || int(n) > i {
			h.order[a.Value] = int(n)
		}
		if j, ok := h.order[h.newest]; !ok || h.order[a.Value] >= j {
			h.newest = a.Value
		}
		return
	}
	seen := h.byNode[node]
	if seen == nil {
		seen = map[string]int{}
		h.byNode[node] = seen
	}
	i, ok := h.order[a.Value]
	if at, again := seen[a.Value]; !ok || (again && at == i) {
		i = h.next // first heard, or this node's second Proclaim of it
		h.order[a.Value] = i
		h.next++
	}
	seen[a.Value] = i
	if j, ok := h.order[h.newest]; !ok || i >= j {
		h.newest = a.Value
	}
}

// older reports that v was heard, for term, before w; a value not heard is
// older than any heard.
func (h *heardValues) older(term int64, v, w string) bool {
	if term != h.term {
		return false
	}
	i, vHeard := h.order[v]
	j, wHeard := h.order[w]
	return wHeard && (!vHeard || i < j)
}

// refresh reads the leader and sends what changed: first the announcements
// heard since the last read that the read did not supersede, then the
// leader read. It arms the timer for the end of the leader's lease, or
// for a retry when the read failed.
//
// A read supersedes every announcement of its own term: it was made after
// they were heard, so it holds their latest value, and an announcement
// sent after it would put an older value after a newer one (a leader that
// Proclaims v1, v2, v3 in a row is heard v1, read v3, then heard v2). What
// is left are leaders that came and went between two reads (a term between
// the last one sent and the one read), or every announcement when the read
// failed.
func (o *observer) refresh(ctx context.Context, anns []Leader) {
	o.timer.Stop()
	if o.nUp < o.e.c.Pool.Quorum {
		// Not subscribed on a quorum: a message could be missed, so what a
		// read says would not stay true. Wait for the subscriptions.
		return
	}
	cur, err := o.e.read(ctx)
	known := err == nil || errors.Is(err, ErrNoLeader)
	for _, a := range anns {
		switch {
		case a.Term <= o.highest && (!known || a.Term != o.sent.Term):
			// Reported already and ended since (a 0 or a later term was
			// sent after it): a message a reader held back would read
			// as that leader coming back.
			continue
		case !known:
		case a.Term == cur.Term:
			continue // the read has this term's latest value
		case cur.Term != 0 && a.Term > cur.Term:
			continue // a read of a Redlock that lags the announcement: the next read says
		}
		o.send(a)
	}
	switch {
	case !known:
		if ctx.Err() != nil {
			return
		}
		o.send(Leader{})
		o.timer.Reset(observeRetry)
	case cur.Term == 0:
		o.send(Leader{})
	default:
		if o.heard.older(cur.Term, cur.Value, o.heard.newest) {
			cur.Value = o.heard.newest // a lagging read (Redlock): the newest announced
		}
		o.send(cur)
		if cur.TTL > 0 {
			o.timer.Reset(cur.TTL + expiryMargin)
		}
	}
}

// send passes l on unless it changes nothing, or it is older than a leader
// already sent. It never blocks: when the reader is a full buffer behind,
// the oldest change is dropped.
func (o *observer) send(l Leader) {
	switch {
	case l.Term == 0:
		if o.sent.Term == 0 {
			return
		}
	case l.Term < o.highest:
		return
	case l.Term == o.sent.Term && (l.Value == o.sent.Value || o.heard.older(l.Term, l.Value, o.sent.Value)):
		return
	}
	o.sent = l
	o.highest = max(o.highest, l.Term)
	select {
	case o.out <- l:
		return
	default:
	}
	select {
	case <-o.out:
	default: // the reader took one meanwhile: there is room
	}
	o.out <- l // run is the only sender, and there is room now
}

// parseAnnouncement reads proclaim.lua's message "<term>.<n>\n<value>" (see
// Election.announce), or "<term>\n<value>" from a leader of a release before
// the number (n 0).
func parseAnnouncement(s string) (l Leader, n int64, ok bool) {
	t, v, ok := strings.Cut(s, "\n")
	if !ok {
		return Leader{}, 0, false
	}
	t, num, numbered := strings.Cut(t, ".")
	term, err := strconv.ParseInt(t, 10, 64)
	if err != nil || term <= 0 {
		return Leader{}, 0, false
	}
	if numbered {
		if n, err = strconv.ParseInt(num, 10, 64); err != nil || n <= 0 {
			return Leader{}, 0, false
		}
	}
	return Leader{Value: v, Term: term}, n, true
}

// receive reads node n's pub/sub connection, subscribed to the election
// and release channels, and hands what it hears to run, until run stops.
// go-redis re-dials and re-subscribes after an error on the next Receive.
func (o *observer) receive(n *node.Node) {
	defer o.e.c.Life.WG.Done()
	// The SUBSCRIBE is only written here (its confirmation comes through
	// Receive), but a new connection's handshake is read: bound it.
	sctx, cancel := context.WithTimeout(context.Background(), pubsub.SubTimeout)
	ps := n.Client.Subscribe(sctx, o.e.elect, o.e.rel)
	cancel()
	if !o.keep(n.Idx, ps) {
		_ = ps.Close()
		return
	}
	for {
		msg, err := ps.Receive(context.Background())
		if err != nil {
			if !o.post(observeEvent{kind: eventDown, node: n.Idx}) {
				return
			}
			// Pause before go-redis dials again, so that a node refusing
			// connections is not dialled in a tight loop.
			t := time.NewTimer(50 * time.Millisecond)
			select {
			case <-o.stop:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		var ev observeEvent
		switch m := msg.(type) {
		case *redis.Subscription:
			// SUBSCRIBE confirms the channels in order; the release channel
			// comes last.
			if m.Kind != "subscribe" || m.Channel != o.e.rel {
				continue
			}
			ev = observeEvent{kind: eventUp, node: n.Idx}
		case *redis.Message:
			ev = observeEvent{kind: eventMessage, node: n.Idx, channel: m.Channel, payload: m.Payload}
		default:
			continue
		}
		if !o.post(ev) {
			return
		}
	}
}

// post hands ev to run; false once run has stopped.
func (o *observer) post(ev observeEvent) bool {
	select {
	case o.events <- ev:
		return true
	case <-o.stop:
		return false
	}
}

// keep records node i's connection for shutdown; false if run has already
// stopped.
func (o *observer) keep(i int, ps *redis.PubSub) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return false
	}
	o.conns[i] = ps
	return true
}

// shutdown ends the readers: closing a connection ends its Receive.
func (o *observer) shutdown() {
	close(o.stop)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	for _, ps := range o.conns {
		if ps != nil {
			_ = ps.Close()
		}
	}
}
