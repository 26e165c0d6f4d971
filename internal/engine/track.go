package engine

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/lifecycle"
	"github.com/redlockgo/redlock/internal/node"
)

// Loss heard at once. Each node of a core whose client is a *redis.Client
// (standalone or Sentinel-managed) may get two connections of its own: a
// listener, RESP2, subscribed to __redis__:invalidate, and a data
// connection that runs CLIENT TRACKING ON REDIRECT <the listener's id>
// NOLOOP (default mode, not BCAST): the server then tells the listener of a
// change to a key only if the data connection read it (keys read by a
// script's commands count: verified on Redis 7.0), and only once per read:
// a write drops the key from the server's tracking table, even when NOLOOP
// leaves it untold. So an instance hears of its own held keys only, not of
// the fleet's (issue "scale": BCAST sent every renewal under the prefix to
// every instance).
//
// Arming. The connections open once a lock of the core has been held for
// ArmAfter, and close after DisarmAfter with none held: short critical
// sections never open them, and their own path sends nothing extra in any
// case. A held lock is armed by a read of its keys (the pttl scripts) on the
// data connection: every held lock when the listener (re)subscribes or the
// data connection (re)connects (changes while nobody listened were not
// heard), and a lock that becomes held while they are open at ArmAfter of
// hold. The reads are pipelined, up to VerifyBatch locks per node in
// flight. The same read decides: a lock that is no longer ours on so many
// nodes that a quorum is out of reach is lost then, with the reason the
// read found.
//
// Renewals. The watchdog renews on the data connection while it is up
// (routes), with extend scripts that read the key again after moving it:
// NOLOOP keeps the renewal itself silent, and the read after the write
// puts the key back in the tracking table. A renewal costs no message, and
// no command or round trip more (one read more inside its script). While
// the data connection is down (a call on it failed on the connection),
// renewals and reads go through the pool, and the keeper pings it every
// FollowEvery; once it answers, the locks read through the pool meanwhile
// are read on it again. The keeper also pings one left unused for
// IdlePing, which finds one killed while idle; a new connection arms every
// held lock again.
//
// Own writes from other connections (acquisitions, Extend, releases,
// hand-offs, all on the pool) are told apart by count: before each write to
// its key, a lock gets a credit per node (not for a renewal on a node's
// data connection, which is silent), and an invalidation of the key
// consumes a credit of one of the locks watching it instead of raising
// suspicion. The server queues the invalidation of a write before the
// write's reply, so a credit that no invalidation consumed within creditFor
// of the reply was for a write that changed nothing, or of a key nobody
// tracked; it lapses. A released lock leaves the book when its release
// answers; its credits stay as its keys' ghosts until spent or lapsed
// (retire). An own write whose invalidation came dropped the key
// from the tracking table: the held locks watching it (not those being
// released) are read again, which arms them. A lock is
// watched from before its acquisition is sent until its release has
// answered, so that its own acquisition and release are counted too. Any
// change that no credit covers makes the locks watching the key suspect,
// and they are read at once. A FLUSHALL (a message without keys) makes
// every held lock suspect.
//
// What an instance pays per held lock: one read at ArmAfter of hold (none
// for shorter holds), one more after each own write through the pool
// (Extend), an invalidation message for its release, and a read per held
// lock after a reconnection; the server keeps one tracking-table entry per
// armed key.

// InvalidateChannel is where a RESP2 connection hears its invalidations.
const InvalidateChannel = "__redis__:invalidate"

// creditFor is how long after its reply an own write's credit may still
// absorb an invalidation: long enough for a starved reader to get to the
// invalidation (one that comes later only costs a read).
const creditFor = 2 * time.Second

// ArmAfter is how long a lock must have been held for the tracking
// connections to open, and DisarmAfter how long they stay open with no lock
// held.
const (
	ArmAfter    = 50 * time.Millisecond
	DisarmAfter = 2 * time.Second
)

// Tracker hears outside changes of a core's held keys, as described
// above, on the nodes whose client is a *redis.Client; it is nil on a core
// without any, and its methods that the core calls do nothing on nil. It
// keeps the book of watched keys (watched, suspect, under mu) and owns its
// parts: per node a listener and a data connection (trackConn,
// track_conn.go), the keeper that opens and closes them (track_keeper.go),
// the reader of suspect locks (track_reader.go), the routes of
// renewals and reads (track_route.go), and what it makes of an
// invalidation (track_invalidate.go); a lock's credits are its lockTrack
// (track_credit.go). Safe for concurrent use.
type Tracker struct {
	life   *lifecycle.Life
	logger *slog.Logger
	nodes  int
	Conns  []*trackConn
	byNode []*trackConn // by node index, nil for a node without tracking
	// on: some node's tracking connection may be armed, so the bookkeeping
	// below is worth its cost.
	on    atomic.Bool
	Armed atomic.Bool // the connections are open (the keeper's)
	// AfterArm, when set (by tests, before the first lock), is called by
	// the keeper once arm has started the subscriptions.
	AfterArm func()
	ctx      context.Context
	cancel   context.CancelFunc
	// keeper opens and closes the connections, and reader reads the
	// suspect locks: each runs one goroutine of the tracker's.
	keeper keeper
	reader suspectReader

	Mu      sync.Mutex
	watched map[string]watchers
	// ghosts are the credits that released locks left on their keys while
	// the connections were open: their releases' invalidations may still
	// come (retire). Lapsed ones go at the keeper's next round.
	ghosts map[string]ghost
	// kept counts the released locks still watched because a write of
	// theirs was in flight at their release; the keeper unwatches them
	// once their credits lapse.
	kept    int
	Suspect map[*Hold]struct{}
	spent   []*Hold // invalidated's, kept for the next message
	// Arming are the locks that became held while armed, in that order:
	// each is read (armed) at ArmAfter of hold (the reader's queue).
	Arming  []*Hold
	ArmHead int // arming[:ArmHead] are done
	// unarmed are locks read through the pool while a node's data
	// connection was down: read again once it is back (probe).
	unarmed map[*Hold]struct{}

	// Counts, for tests: keys heard in invalidations, those no credit
	// covered (AfterConnect: within creditFor of a data connection's
	// replacing another), and locks read.
	Heard, Outside, AfterConnect, Reads atomic.Int64
	dataConnected                       atomic.Int64 // when a data connection last connected (UnixNano)
}

// newTracker prepares the tracking connections of each node whose client can
// have one, and starts the keeper that opens them; nil if none can.
func newTracker(nodes []*node.Node, life *lifecycle.Life, logger *slog.Logger, verify func([]*Hold, []node.Client) ([]bool, []bool)) *Tracker {
	t := &Tracker{life: life, logger: logger, nodes: len(nodes), watched: map[string]watchers{}, ghosts: map[string]ghost{},
		Suspect: map[*Hold]struct{}{}, unarmed: map[*Hold]struct{}{}, byNode: make([]*trackConn, len(nodes))}
	t.keeper = keeper{t: t, held: make(chan struct{}, 1)}
	t.reader = suspectReader{t: t, verify: verify, kick: make(chan struct{}, 1)}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	for _, n := range nodes {
		base, ok := n.Client.(*redis.Client)
		if !ok {
			continue // Cluster, Ring, custom clients: loss is found at the next renewal
		}
		tc := newTrackConn(t, n.Idx, base)
		t.Conns = append(t.Conns, tc)
		t.byNode[n.Idx] = tc
	}
	if len(t.Conns) == 0 || !life.GoCount(2) {
		t.cancel()
		for _, tc := range t.Conns {
			_ = tc.cl.Close()
		}
		return nil
	}
	t.on.Store(true)
	go t.reader.run()
	go t.keeper.run()
	return t
}

// close ends the keeper, which closes the connections, and the reader
// (Close waits for them with the core's goroutines).
func (t *Tracker) close() {
	if t == nil {
		return
	}
	t.on.Store(false)
	t.cancel()
}

// giveUp stops tracking on one node for good; with no node left, the
// bookkeeping stops too.
func (t *Tracker) giveUp(tc *trackConn) {
	tc.gone.Store(true)
	t.Mu.Lock()
	defer t.Mu.Unlock()
	for _, o := range t.Conns {
		if !o.gone.Load() {
			return
		}
	}
	t.on.Store(false)
	clear(t.watched)
	clear(t.ghosts)
	t.kept = 0
	clear(t.Suspect)
	clear(t.unarmed)
}

// expect gives l a credit on every node before an own write to its keys;
// settle ends the write. Neither does anything without tracking.
func (t *Tracker) expect(l *Hold) {
	if t == nil {
		return
	}
	t.expectOn(l, creditMask(t.nodes))
}

// expectOn is expect with the credits of credit (creditMask's form): a
// write on a node's data connection is silent and needs none.
func (t *Tracker) expectOn(l *Hold, credit uint64) {
	if t == nil || !t.on.Load() || l.trk == nil {
		return
	}
	l.trk.inflight.Add(1)
	l.trk.credits.Add(credit)
}

// settle ends an own write of l that expect announced; changed false says
// the write changed nothing (a refused acquisition), so its credit goes at
// once.
func (t *Tracker) settle(l *Hold, changed bool) {
	if t == nil || !t.on.Load() || l.trk == nil {
		return
	}
	l.trk.until.Store(time.Now().Add(creditFor).UnixNano())
	if !changed {
		for i := range min(t.nodes, creditNodes) {
			l.trk.take(i)
		}
	}
	l.trk.inflight.Add(-1)
}

// watchKeys are the keys whose change may mean that l is lost: the lock
// key, a read hold's or permit's set, every name's key of a multi-name lock.
func watchKeys(l *Hold) []string {
	if l.Kind == KindMulti {
		return l.Keys
	}
	return l.Keys[:1]
}

// watch and unwatch add and remove a lock: from before its acquisition is
// sent until it is lost, or its release answered.
func (t *Tracker) watch(l *Hold) {
	if t == nil || !t.on.Load() {
		return
	}
	if l.trk == nil {
		// Not in Lock itself: with tracking off, a Lock stays in the
		// smaller allocation size class (the loss clock's tests at 20,000
		// locks feel the difference).
		l.trk = new(lockTrack)
	}
	t.Mu.Lock()
	defer t.Mu.Unlock()
	for _, k := range watchKeys(l) {
		t.watched[k] = t.watched[k].with(l)
	}
}

func (t *Tracker) unwatch(l *Hold) {
	if t == nil {
		return
	}
	t.Mu.Lock()
	defer t.Mu.Unlock()
	t.unwatchLocked(l)
}

// retire unwatches a released lock. Its credits that may still absorb an
// invalidation (its release's, if the key was tracked) stay behind as its
// keys' ghosts, so that a next lock on the key does not take that
// invalidation for a change; with the connections closed none can come,
// and nothing stays. Only a lock with a write still in flight (a renewal
// that crossed the release) stays watched, until its credits lapse
// (sweep). Nothing of a released lock is kept longer than creditFor after
// its last write's reply: every lock of a hot name, or of a name used
// once, would otherwise stay in the book for good, since the invalidation
// that removes it never comes for a key nobody read.
func (t *Tracker) retire(l *Hold) {
	if t == nil || l.trk == nil {
		return
	}
	t.Mu.Lock()
	defer t.Mu.Unlock()
	l.trk.retired.Store(true)
	switch now := time.Now().UnixNano(); {
	case !l.trk.live(now) || !t.Armed.Load():
	case l.trk.inflight.Load() == 0:
		credits, until := l.trk.credits.Load(), l.trk.until.Load()
		for _, k := range watchKeys(l) {
			t.ghosts[k] = t.ghosts[k].with(credits, until, now)
		}
	default:
		l.trk.kept = true
		t.kept++
		return
	}
	t.unwatchLocked(l)
}

// Book is how many locks the tracker watches (held, being taken, or
// released with a write in flight) and on how many keys released locks
// left credits: for tests.
func (t *Tracker) Book() (locks, ghosts int) {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	for _, w := range t.watched {
		locks += 1 + len(w.more)
	}
	return locks, len(t.ghosts)
}

// sweep drops the ghosts that lapsed and unwatches the released locks
// whose credits did (the keeper's, every FollowEvery while armed); with
// all true, every ghost and released lock (disarmed: no invalidation can
// come).
func (t *Tracker) sweep(all bool) {
	now := time.Now().UnixNano()
	t.Mu.Lock()
	defer t.Mu.Unlock()
	for k, g := range t.ghosts {
		if all || !g.live(now) {
			delete(t.ghosts, k)
		}
	}
	if t.kept == 0 {
		return
	}
	var gone []*Hold
	for _, w := range t.watched {
		for l := range w.all {
			if l.trk.retired.Load() && (all || !l.trk.live(now)) {
				gone = append(gone, l)
			}
		}
	}
	for _, l := range gone {
		t.unwatchLocked(l)
	}
}

func (t *Tracker) unwatchLocked(l *Hold) {
	delete(t.Suspect, l)
	delete(t.unarmed, l)
	if l.trk != nil && l.trk.kept {
		l.trk.kept = false
		t.kept--
	}
	for _, k := range watchKeys(l) {
		w, ok := t.watched[k]
		if !ok {
			continue
		}
		if w = w.without(l); w.one == nil {
			delete(t.watched, k)
		} else {
			t.watched[k] = w
		}
	}
}

// heldNow records that l became held: the keeper opens the connections
// for it, or, while they are open, the reader arms it at ArmAfter of
// hold.
func (t *Tracker) heldNow(l *Hold) {
	if t == nil || !t.on.Load() || l.trk == nil {
		return
	}
	l.trk.heldAt.Store(time.Now().UnixNano())
	if !t.Armed.Load() {
		// Armed later: the subscription then reads every held lock.
		t.keeper.wake()
		return
	}
	t.reader.queue(l)
}

// heldSince reports whether a watched lock held since before cutoff
// (UnixNano) exists, and whether any is held; with cutoff 0 (the armed
// keeper's question, every FollowEvery) it stops at the first held lock
// instead of scanning thousands.
func (t *Tracker) heldSince(cutoff int64) (old, any bool) {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	for _, w := range t.watched {
		for l := range w.all {
			at := l.trk.heldAt.Load()
			if at == 0 || l.trk.retired.Load() {
				continue
			}
			if at <= cutoff {
				return true, true
			}
			if cutoff == 0 {
				return false, true
			}
			any = true
		}
	}
	return false, any
}

// watching reports whether l is in the book (t.mu held).
func (t *Tracker) watching(l *Hold) bool {
	keys := watchKeys(l)
	if len(keys) == 0 {
		return false
	}
	w := t.watched[keys[0]]
	return w.one == l || slices.Contains(w.more, l)
}

// watchers are the held locks of the core on one key: usually one.
type watchers struct {
	one  *Hold
	more []*Hold
}

// all yields the locks of w, its one first.
func (w watchers) all(yield func(*Hold) bool) {
	if !yield(w.one) {
		return
	}
	for _, l := range w.more {
		if !yield(l) {
			return
		}
	}
}

// with is w and l.
func (w watchers) with(l *Hold) watchers {
	if w.one == nil {
		w.one = l
	} else {
		w.more = append(w.more, l)
	}
	return w
}

// without is w but l; its one is nil when no lock is left.
func (w watchers) without(l *Hold) watchers {
	if w.one == l {
		w.one = nil
		if n := len(w.more); n > 0 {
			w.one, w.more = w.more[n-1], w.more[:n-1]
		}
	} else {
		for i, o := range w.more {
			if o == l {
				w.more = append(w.more[:i], w.more[i+1:]...)
				break
			}
		}
	}
	return w
}
