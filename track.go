package redlock

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Loss heard at once. Each node of a core whose client is a *redis.Client
// (standalone or Sentinel-managed) may get one connection of its own that
// asks the server to tell it of every change to a key under the library's
// prefix: CLIENT TRACKING ON REDIRECT <itself> BCAST PREFIX "{<prefix>",
// then SUBSCRIBE __redis__:invalidate, so that the server's invalidation
// messages arrive as pub/sub messages (RESP2) on the same connection. The
// connections open once a lock of the core has been held for armAfter, and
// close after disarmAfter with none held: short critical sections never
// open them (a BCAST connection hears every lock event under the prefix,
// from every process, which costs the server a message per event), and
// their own path sends nothing extra in any case. Every change to a key the
// core holds that is not one of its own writes makes the locks on it
// suspect, and they are read at once (the pttl scripts): a lock that is no
// longer ours on enough nodes is lost then, with the reason the read found,
// instead of at its next renewal. A FLUSHALL (a message without keys) and
// every (re)connection of a tracking connection (its opening included:
// changes before it were not heard) make every held lock suspect.
//
// Own writes are told apart by count: before each write to its key, a
// lock gets a credit per node, and an invalidation of the key consumes a
// credit of one of the locks watching it instead of raising suspicion. The
// server queues the invalidation of a write before the write's reply, so a
// credit that no invalidation consumed within creditFor of the reply was
// for a write that changed nothing; it lapses. A lock is watched from
// before its acquisition is sent until its release has answered, so that
// its own acquisition and release are counted too.

// invalidateChannel is where a RESP2 connection hears its invalidations.
const invalidateChannel = "__redis__:invalidate"

// creditFor is how long after its reply an own write's credit may still
// absorb an invalidation: long enough for a starved reader to get to the
// invalidation (one that comes later only costs a read).
const creditFor = 2 * time.Second

// acquiringRecheck is how soon a lock that was suspect while still being
// acquired is looked at again.
const acquiringRecheck = 2 * time.Millisecond

// armAfter is how long a lock must have been held for the tracking
// connections to open, and disarmAfter how long they stay open with no lock
// held.
const (
	armAfter    = 50 * time.Millisecond
	disarmAfter = 2 * time.Second
)

// verifyBatch bounds the reads in flight when many locks are suspect at
// once (a FLUSHALL under many holds).
const verifyBatch = 16

type tracker struct {
	life   *lifecycle
	logger *slog.Logger
	// verify reads a suspect lock, and loses it if it is not ours; later
	// says it is still being acquired, to be read once it is held.
	verify func(*Lock) (later bool)
	nodes  int
	conns  []*trackConn
	// on: some node's tracking connection may be armed, so the bookkeeping
	// below is worth its cost.
	on     atomic.Bool
	armed  atomic.Bool   // the connections are open (the keeper's)
	held   chan struct{} // buffered 1: a lock became held
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	watched map[string]watchers
	suspect map[*Lock]struct{}
	kick    chan struct{} // buffered 1: suspects were added
	spent   []*Lock       // invalidated's, kept for the next message
}

// watchers are the held locks of the core on one key: usually one.
type watchers struct {
	one  *Lock
	more []*Lock
}

// lockTrack is a lock's credits for its own writes: a count per node, one
// byte each (a lock has a few writes in flight at most), for the first
// creditNodes nodes; a change on a later node is always read. Atomic, so
// that a renewal of thousands of locks takes no shared mutex.
type lockTrack struct {
	credits  atomic.Uint64
	inflight atomic.Int32
	until    atomic.Int64 // with inflight 0: when the credits lapse (UnixNano)
	// retired: released, and still watched only until the release's
	// invalidation comes (or its credit lapses), so that a next lock on
	// the key does not take it for a change.
	retired atomic.Bool
	heldAt  atomic.Int64 // when it became held (UnixNano), 0 before
}

// creditNodes is how many nodes' credits a lockTrack counts.
const creditNodes = 8

// creditMask has a credit of one on each of the first n nodes.
func creditMask(n int) uint64 {
	if n >= creditNodes {
		return 0x0101010101010101
	}
	return 0x0101010101010101 & (1<<(8*n) - 1)
}

// trackConn is one node's tracking connection.
type trackConn struct {
	t   *tracker
	idx int
	cl  *redis.Client
	// dial is the Sentinel client's dialer, which dials the master of the
	// moment; nil for a client of one address. remote is the address the
	// tracking connection last reached through it.
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	addr   string
	remote atomic.Pointer[string]
	ps     *redis.PubSub // while armed (the keeper's)
	stop   chan struct{} // closed when the armed connection is closed
	gone   atomic.Bool   // the server refused tracking: never armed again

	mu     sync.Mutex
	armErr error // the last OnConnect's error
}

// newTracker prepares a tracking connection for each node whose client can
// have one, and starts the keeper that opens them; nil if none can.
func newTracker(nodes []*node, prefix string, life *lifecycle, logger *slog.Logger, verify func(*Lock) bool) *tracker {
	t := &tracker{life: life, logger: logger, verify: verify, nodes: len(nodes), watched: map[string]watchers{},
		suspect: map[*Lock]struct{}{}, kick: make(chan struct{}, 1), held: make(chan struct{}, 1)}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	for _, n := range nodes {
		base, ok := n.client.(*redis.Client)
		if !ok {
			continue // Cluster, Ring, custom clients: loss is found at the next renewal
		}
		t.conns = append(t.conns, newTrackConn(t, n.idx, base, "{"+prefix))
	}
	if len(t.conns) == 0 || !life.goCount(2) {
		t.cancel()
		for _, tc := range t.conns {
			_ = tc.cl.Close()
		}
		return nil
	}
	t.on.Store(true)
	go t.verifier()
	go t.keeper()
	return t
}

// newTrackConn makes the client of one node's tracking connection: the
// node client's options (address, dialer, credentials, TLS; a Sentinel
// client's dialer follows the master), RESP2, the name redlock-tracking,
// and the tracking command run on every new connection before it
// subscribes.
func newTrackConn(t *tracker, idx int, base *redis.Client, prefix string) *trackConn {
	tc := &trackConn{t: t, idx: idx}
	opt := *base.Options()
	opt.Protocol = 2
	opt.ClientName = "redlock-tracking"
	opt.PoolSize, opt.MinIdleConns, opt.MaxIdleConns = 1, 0, 0
	prev := opt.OnConnect
	opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		var err error
		if prev != nil {
			err = prev(ctx, cn)
		}
		var id int64
		if err == nil {
			id, err = cn.ClientID(ctx).Result()
		}
		if err == nil {
			err = cn.Do(ctx, "client", "tracking", "on", "redirect", id, "bcast", "prefix", prefix).Err()
		}
		tc.mu.Lock()
		tc.armErr = err
		tc.mu.Unlock()
		return err
	}
	if d := sentinelDialer(base); d != nil {
		// go-redis's Sentinel client: its dialer follows the master. The
		// tracking connection stays on the old master after a failover
		// until the sentinels reconfigure it; the keeper compares where a
		// fresh dial lands (masterMoved) and moves it.
		tc.dial, tc.addr = d, opt.Addr
		opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			cn, err := tc.dial(ctx, network, addr)
			if err == nil {
				a := cn.RemoteAddr().String()
				tc.remote.Store(&a)
			}
			return cn, err
		}
	}
	tc.cl = redis.NewClient(&opt)
	return tc
}

// followEvery is how often, while armed, the keeper checks that a
// Sentinel client's master is still where the tracking connection is.
const followEvery = 250 * time.Millisecond

// masterMoved reports that a fresh dial of a Sentinel client reaches
// another address than the tracking connection: a failover happened. The
// dial is a TCP connection closed at once, no command.
func (tc *trackConn) masterMoved(ctx context.Context) bool {
	was := tc.remote.Load()
	if tc.dial == nil || was == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, followEvery)
	defer cancel()
	cn, err := tc.dial(ctx, "tcp", tc.addr)
	if err != nil {
		return false
	}
	now := cn.RemoteAddr().String()
	_ = cn.Close()
	return now != *was
}

// close ends the keeper, which closes the connections, and the verifier
// (Close waits for them with the core's goroutines).
func (t *tracker) close() {
	if t == nil {
		return
	}
	t.on.Store(false)
	t.cancel()
}

// heldNow records that l became held, for the keeper.
func (t *tracker) heldNow(l *Lock) {
	if t == nil || !t.on.Load() || l.trk == nil {
		return
	}
	l.trk.heldAt.Store(time.Now().UnixNano())
	if !t.armed.Load() {
		select {
		case t.held <- struct{}{}:
		default:
		}
	}
}

// keeper opens the tracking connections once a lock has been held for
// armAfter, and closes them after disarmAfter with no lock held, until
// Close.
func (t *tracker) keeper() {
	defer t.life.wg.Done()
	defer func() {
		t.disarm()
		for _, tc := range t.conns {
			_ = tc.cl.Close()
		}
	}()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-t.held:
		}
		for !t.armed.Load() { // bounded: ends when no lock is held
			if !t.pause(armAfter) {
				return
			}
			old, any := t.heldSince(time.Now().Add(-armAfter).UnixNano())
			if old {
				t.arm()
			} else if !any {
				break
			}
		}
		for idle := 0; t.armed.Load(); {
			if !t.pause(followEvery) {
				return
			}
			t.follow()
			if _, any := t.heldSince(0); any {
				idle = 0
			} else if idle++; time.Duration(idle)*followEvery >= disarmAfter {
				t.disarm()
			}
		}
	}
}

// follow moves the tracking connection of a Sentinel client whose master
// changed to the new master, where its subscription then makes every held
// lock suspect (the keeper's).
func (t *tracker) follow() {
	for _, tc := range t.conns {
		if tc.ps == nil || !tc.masterMoved(t.ctx) {
			continue
		}
		t.logger.Info("redlock: the master moved; tracking follows it", "node", tc.idx)
		close(tc.stop)
		_ = tc.ps.Close()
		tc.remote.Store(nil)
		if t.life.goCount(1) {
			tc.ps, tc.stop = tc.cl.Subscribe(t.ctx), make(chan struct{})
			go tc.run(tc.ps, tc.stop)
		} else {
			tc.ps, tc.stop = nil, nil
		}
	}
}

// pause waits d, or reports false at Close.
func (t *tracker) pause(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-t.ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// heldSince reports whether a watched lock held since before cutoff
// (UnixNano) exists, and whether any is held.
func (t *tracker) heldSince(cutoff int64) (old, any bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, w := range t.watched {
		for i := -1; i < len(w.more); i++ {
			l := w.one
			if i >= 0 {
				l = w.more[i]
			}
			at := l.trk.heldAt.Load()
			if at == 0 || l.trk.retired.Load() {
				continue
			}
			any = true
			if at <= cutoff {
				return true, true
			}
		}
	}
	return false, any
}

// arm opens the tracking connections (the keeper's).
func (t *tracker) arm() {
	for _, tc := range t.conns {
		if tc.gone.Load() || !t.life.goCount(1) {
			continue
		}
		tc.ps, tc.stop = tc.cl.Subscribe(t.ctx), make(chan struct{}) // connects in run
		go tc.run(tc.ps, tc.stop)
	}
	t.armed.Store(true)
}

// disarm closes them.
func (t *tracker) disarm() {
	t.armed.Store(false)
	for _, tc := range t.conns {
		if tc.ps != nil {
			close(tc.stop)
			_ = tc.ps.Close()
			tc.ps, tc.stop = nil, nil
		}
	}
}

// run subscribes one node's tracking connection and reads it until it is
// closed.
func (tc *trackConn) run(ps *redis.PubSub, stop <-chan struct{}) {
	t := tc.t
	defer t.life.wg.Done()
	closed := func() bool {
		select {
		case <-stop:
			return true
		default:
			return t.ctx.Err() != nil
		}
	}
	_ = ps.Subscribe(t.ctx, invalidateChannel) // on failure, Receive reconnects and subscribes
	for {
		msg, err := ps.Receive(t.ctx)
		if closed() {
			return
		}
		if err != nil {
			if tc.refused() {
				t.logger.Debug("redlock: the server refuses CLIENT TRACKING; a lost lock is found at its next renewal",
					"node", tc.idx, "err", tc.armError())
				t.giveUp(tc)
				return
			}
			if !connErr(err) {
				// A message go-redis cannot parse: the invalidation of a
				// whole database (FLUSHALL, FLUSHDB) has no key list.
				t.suspectAll()
				continue
			}
			t.forgetCredits() // invalidations may have been lost
			pause := time.NewTimer(50 * time.Millisecond)
			select {
			case <-stop:
				pause.Stop()
				return
			case <-t.ctx.Done():
				pause.Stop()
				return
			case <-pause.C:
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			// (Re)connected: what changed while no connection listened was
			// not heard, and credits of writes made before may have no
			// invalidation to meet.
			t.forgetCredits()
			t.suspectAll()
		case *redis.Message:
			if m.Channel == invalidateChannel {
				t.invalidated(tc.idx, m.PayloadSlice)
			}
		}
	}
}

// refused reports that the server answered the tracking set-up with an
// error (an old server, miniredis, an ACL without CLIENT): retrying cannot
// help.
func (tc *trackConn) refused() bool {
	var rerr redis.Error
	return errors.As(tc.armError(), &rerr)
}

func (tc *trackConn) armError() error {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.armErr
}

// connErr reports whether err is the connection's (closed, reset, timed
// out), not a message's.
func connErr(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, redis.ErrClosed) || errors.As(err, &ne) || errors.As(err, new(redis.Error))
}

// giveUp stops tracking on one node for good; with no node left, the
// bookkeeping stops too.
func (t *tracker) giveUp(tc *trackConn) {
	tc.gone.Store(true)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, o := range t.conns {
		if !o.gone.Load() {
			return
		}
	}
	t.on.Store(false)
	clear(t.watched)
	clear(t.suspect)
}

// expect gives l a credit on every node before an own write to its keys;
// settle ends the write. Neither does anything without tracking.
func (t *tracker) expect(l *Lock) {
	if t == nil || !t.on.Load() || l.trk == nil {
		return
	}
	l.trk.inflight.Add(1)
	l.trk.credits.Add(creditMask(t.nodes))
}

// settle ends an own write of l that expect announced; changed false says
// the write changed nothing (a refused acquisition), so its credit goes at
// once.
func (t *tracker) settle(l *Lock, changed bool) {
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

// take consumes one credit of node, if there is one.
func (k *lockTrack) take(node int) bool {
	if node >= creditNodes {
		return false
	}
	shift := 8 * node
	for range 64 { // bounded: a lost race means another credit moved
		c := k.credits.Load()
		if c>>shift&0xff == 0 {
			return false
		}
		if k.credits.CompareAndSwap(c, c-1<<shift) {
			return true
		}
	}
	return false
}

// spend consumes a credit of node if l has a live one.
func (k *lockTrack) spend(node int, now int64) bool {
	if k.inflight.Load() == 0 && now >= k.until.Load() {
		k.credits.Store(0) // lapsed
		return false
	}
	return k.take(node)
}

// forgetCredits drops every watched lock's credits: their invalidations may
// never come.
func (t *tracker) forgetCredits() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, w := range t.watched {
		w.one.trk.credits.Store(0)
		for _, l := range w.more {
			l.trk.credits.Store(0)
		}
	}
}

// watchKeys are the keys whose change may mean that l is lost: the lock
// key, a read hold's or permit's set, every name's key of a multi-name lock.
func watchKeys(l *Lock) []string {
	if l.kind == kindMulti {
		return l.keys
	}
	return l.keys[:1]
}

// watch and unwatch add and remove a lock: from before its acquisition is
// sent until it is lost, or its release answered.
func (t *tracker) watch(l *Lock) {
	if t == nil || !t.on.Load() {
		return
	}
	if l.trk == nil {
		// Not in Lock itself: with tracking off, a Lock stays in the
		// smaller allocation size class (the loss clock's tests at 20,000
		// locks feel the difference).
		l.trk = new(lockTrack)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range watchKeys(l) {
		w := t.watched[k]
		if w.one == nil {
			w.one = l
		} else {
			w.more = append(w.more, l)
		}
		t.watched[k] = w
	}
}

func (t *tracker) unwatch(l *Lock) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.unwatchLocked(l)
}

// retire unwatches a released lock once its release's invalidation has
// come: at once if it already has (or nothing is in flight).
func (t *tracker) retire(l *Lock) {
	if t == nil || l.trk == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	l.trk.retired.Store(true)
	if !l.trk.live(time.Now().UnixNano()) {
		t.unwatchLocked(l)
	}
}

// live reports whether l has credits that may still be spent.
func (k *lockTrack) live(now int64) bool {
	return k.credits.Load() != 0 && (k.inflight.Load() > 0 || now < k.until.Load())
}

func (t *tracker) unwatchLocked(l *Lock) {
	delete(t.suspect, l)
	for _, k := range watchKeys(l) {
		w, ok := t.watched[k]
		if !ok {
			continue
		}
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
		if w.one == nil {
			delete(t.watched, k)
		} else {
			t.watched[k] = w
		}
	}
}

// invalidated takes node's invalidation of keys: one that a watching lock
// has a credit for is its own write's; any other makes every lock watching
// the key suspect.
func (t *tracker) invalidated(node int, keys []string) {
	now := time.Now().UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	added := false
	// One write of a lock to several keys (a multi-name lock) comes in one
	// message, for one credit.
	spent := t.spent[:0]
	for _, k := range keys {
		w, ok := t.watched[k]
		if !ok {
			continue
		}
		if slices.Contains(spent, w.one) || slices.ContainsFunc(w.more, func(l *Lock) bool { return slices.Contains(spent, l) }) {
			continue
		}
		if l := t.spend(w, node, now); l != nil {
			spent = append(spent, l)
			continue
		}
		t.suspect[w.one] = struct{}{}
		for _, l := range w.more {
			t.suspect[l] = struct{}{}
		}
		added = true
	}
	clear(spent)
	t.spent = spent[:0]
	if added {
		t.wake()
	}
}

// spend takes one credit of node from a lock of w and returns that lock,
// nil if none has one. A retired lock goes once it has none left, or they
// lapsed (t.mu held).
func (t *tracker) spend(w watchers, node int, now int64) *Lock {
	var got *Lock
	var gone []*Lock
	for i := -1; i < len(w.more); i++ {
		l := w.one
		if i >= 0 {
			l = w.more[i]
		}
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

// suspectAll makes every held lock suspect.
func (t *tracker) suspectAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, w := range t.watched {
		t.suspect[w.one] = struct{}{}
		for _, l := range w.more {
			t.suspect[l] = struct{}{}
		}
	}
	if len(t.suspect) > 0 {
		t.wake()
	}
}

func (t *tracker) wake() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// verifier reads suspect locks until Close, up to verifyBatch at a time.
func (t *tracker) verifier() {
	defer t.life.wg.Done()
	var batch []*Lock
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-t.kick:
		}
		for {
			batch = batch[:0]
			t.mu.Lock()
			for l := range t.suspect {
				if len(batch) == verifyBatch {
					break
				}
				batch = append(batch, l)
				delete(t.suspect, l)
			}
			t.mu.Unlock()
			if len(batch) == 0 || t.ctx.Err() != nil {
				break
			}
			var wg sync.WaitGroup
			later := make([]bool, len(batch))
			for i, l := range batch {
				wg.Go(func() { later[i] = t.verify(l) })
			}
			wg.Wait()
			t.mu.Lock()
			again := false
			for i, l := range batch {
				if later[i] {
					t.suspect[l] = struct{}{}
					again = true
				}
			}
			t.mu.Unlock()
			if again {
				// Changed while its acquisition was on the way: read it once
				// it is held (or failed).
				time.AfterFunc(acquiringRecheck, t.wake)
				break
			}
		}
	}
}
