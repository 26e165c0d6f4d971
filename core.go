package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// core is the engine shared by Locker (one node) and Redlock (N nodes): the
// nodes, the registry of held locks, the watchdog, the loss clock and the
// waiters. A Locker is simply a core with a quorum of 1. The operations live
// in their own files: acquire.go, release.go, watchdog.go, wait.go.
type core struct {
	nodes  []*node
	quorum int
	cfg    config
	wd     *watchdog
	exp    *expiry
	hooks  hooks

	ttlBoxed any // ttlMillis(cfg.ttl), boxed once (see ttlArg)

	waits waiters        // pub/sub wake-ups for Lock (wait.go)
	wg    sync.WaitGroup // every goroutine of the core, including calls left behind on a paused node

	closing chan struct{} // closed when Close starts: waiters give up
	closed  chan struct{} // closed when Close returns: a second Close waits for it

	mu sync.Mutex
	// closeStarted: Close has begun; no new lock may be registered.
	closeStarted bool
	// ioStopped: Close has released what it could; no goroutine may start,
	// so wg.Add never races the final wg.Wait.
	ioStopped bool
	held      map[*Lock]struct{}
	// heldKeys counts held locks per lock key, so a waiter of this core does
	// not waste an attempt on a name its own process holds.
	heldKeys map[string]int
}

// hooks let tests put a pause at an exact point of the protocol.
type hooks struct {
	beforeFinalCheck func() // after the last reply (and token write-back), before now < Until
}

// warmUpLimit bounds how long a constructor waits for its nodes to answer
// the warm-up (dial, script load, identity); a node still silent by then is
// dialled by its first call.
const warmUpLimit = time.Second

func newCore(clients []Client, opts []Option) (*core, error) {
	if len(clients) == 0 {
		return nil, errors.New("redlock: no clients")
	}
	cfg, err := defaultConfig().with(opts)
	if err != nil {
		return nil, err
	}
	c := &core{
		quorum:   len(clients)/2 + 1,
		cfg:      cfg,
		closing:  make(chan struct{}),
		closed:   make(chan struct{}),
		held:     make(map[*Lock]struct{}),
		heldKeys: make(map[string]int),
	}
	c.ttlBoxed = ttlMillis(cfg.ttl)
	c.waits = waiters{c: c, queues: make(map[string]*waitQueue)}
	for i, cl := range clients {
		if isNil(cl) {
			return nil, fmt.Errorf("redlock: client %d is nil", i)
		}
		n := newNode(i, cl)
		for _, prev := range c.nodes {
			if samePointer(prev.client, cl) || (serverKey(cl) != "" && serverKey(prev.client) == serverKey(cl)) {
				return nil, fmt.Errorf("redlock: clients %d and %d are the same node (%s); Redlock needs independent masters", prev.idx, i, n.addr)
			}
		}
		c.nodes = append(c.nodes, n)
	}
	if err := c.warmUp(); err != nil {
		return nil, err
	}
	c.wd = newWatchdog(c)
	c.exp = newExpiry()
	return c, nil
}

// warmUp dials every node, loads the scripts and, for a Redlock, learns each
// server's run_id, waiting at most warmUpLimit or the node timeout, whichever
// is longer. Two nodes that turn out to be one server (127.0.0.1:P and
// localhost:P, a DNS alias) make it fail: a quorum that one process can
// satisfy is no quorum.
func (c *core) warmUp() error {
	identify := len(c.nodes) > 1
	limit := max(warmUpLimit, c.cfg.timeout(c.cfg.ttl))
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	done := make(chan struct{}, len(c.nodes))
	c.wg.Add(len(c.nodes))
	for _, n := range c.nodes {
		go func() {
			defer c.wg.Done()
			defer func() { done <- struct{}{} }()
			if n.warmUp(ctx, identify && identifiable(n.client)) {
				// Also when this answer comes after the constructor stopped
				// waiting: the node's votes stop counting from then on.
				c.mu.Lock()
				_ = c.checkDuplicate(n)
				c.mu.Unlock()
			}
		}()
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	defer cancel()
	for range c.nodes {
		select {
		case <-done:
		case <-t.C:
			return c.duplicates()
		}
	}
	return c.duplicates()
}

// duplicates marks and reports nodes whose run_id another node has already.
func (c *core) duplicates() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, n := range c.nodes {
		if n.isDup() {
			continue
		}
		if err := c.checkDuplicate(n); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(append([]error{errors.New("redlock: Redlock needs independent masters")}, errs...)...)
	}
	return nil
}

// checkDuplicate compares n's run_id with every other node's; of two nodes
// with one run_id, the later in the client list is marked a duplicate of
// the earlier. Call it under c.mu, so two nodes identified at once see each
// other.
func (c *core) checkDuplicate(n *node) error {
	id, _ := n.identity()
	if id == "" || id == unidentified {
		return nil
	}
	for _, o := range c.nodes {
		if oid, _ := o.identity(); o == n || oid != id {
			continue
		}
		first, second := o, n
		if n.idx < o.idx {
			first, second = n, o
		}
		second.dup.Store(int32(first.idx))
		return fmt.Errorf("%w: clients %d (%s) and %d (%s) reach one server (run_id %s)", errDuplicate, first.idx, first.addr, second.idx, second.addr, id)
	}
	return nil
}

// identify makes sure a Redlock node's server is known before its vote
// counts, reading its run_id on first contact when the warm-up could not.
func (c *core) identify(ctx context.Context, n *node) error {
	if len(c.nodes) < 2 || !identifiable(n.client) {
		return nil
	}
	id, dup := n.identity()
	if dup >= 0 {
		return fmt.Errorf("%w (node %d)", errDuplicate, dup)
	}
	if id != "" {
		return nil
	}
	id, err := fetchRunID(ctx, n.client)
	if err != nil {
		return err
	}
	n.setRunID(id)
	c.mu.Lock()
	err = c.checkDuplicate(n)
	c.mu.Unlock()
	if n.isDup() {
		return err
	}
	return nil
}

func (n *node) isDup() bool { return n.dup.Load() >= 0 }

func (c *core) nodeErr(i int, err error) error {
	return &NodeError{Node: i, Addr: c.nodes[i].addr, Err: err}
}

// goCount registers n goroutines with the core, or reports false once Close
// has finished, so that wg.Add never races wg.Wait.
func (c *core) goCount(n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ioStopped {
		return false
	}
	c.wg.Add(n)
	return true
}

func (c *core) isClosing() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// activate turns a granted attempt into a held lock and registers it with the
// core and, with auto-renew, the watchdog. A grant that arrives after Close
// started has no owner: it is released at once.
func (c *core) activate(l *Lock, token int64, until time.Time) error {
	c.mu.Lock()
	if c.closeStarted {
		c.mu.Unlock()
		l.finish(stateFailed, "")
		c.releaseOn(context.Background(), l, c.nodes, l.timeout, never)
		return ErrClosed
	}
	// Registered and held in one step under c.mu, so Close either sees the
	// lock held (and releases it) or refuses it above; never in between.
	c.held[l] = struct{}{}
	c.heldKeys[l.keys[0]]++
	l.hold(token, until)
	c.mu.Unlock()
	if l.autoRenew {
		c.wd.schedule(l, l.renewAt(time.Now()))
	}
	return nil
}

// armLoss (re)arms l's loss on the loss clock (engine).
func (c *core) armLoss(l *Lock, at time.Time) { c.exp.set(l, at) }

// abandon releases a lost lock's key on every node from a goroutine of the
// core, waiting for nothing (engine): its holder gave it up by rule.
func (c *core) abandon(l *Lock) { c.releaseInBackground(context.Background(), c.nodes, l) }

// ended is forget, for the engine seam.
func (c *core) ended(l *Lock) { c.forget(l) }

// forget drops a lock that is no longer held from the registry, the watchdog
// and the loss clock. The lock's state changed first, so none can re-add it.
func (c *core) forget(l *Lock) {
	c.mu.Lock()
	_, was := c.held[l]
	if was {
		delete(c.held, l)
		if c.heldKeys[l.keys[0]]--; c.heldKeys[l.keys[0]] <= 0 {
			delete(c.heldKeys, l.keys[0])
		}
	}
	c.mu.Unlock()
	c.wd.remove(l)
	c.exp.remove(l)
	if was {
		c.waits.idle(l.channel)
	}
}

// holds reports whether a lock of this core currently holds key.
func (c *core) holds(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.heldKeys[key] > 0
}

// close cancels every Do and marks every held lock released (Done closes
// first), releases them on the nodes in one pipelined round per node settled
// by quorum, closes the pub/sub connections, and waits for the core's
// goroutines; all within one node timeout. Calls still stuck on a hung
// server after that (only possible when the client does not apply ctx
// deadlines itself) end by the client's own read timeout.
func (c *core) close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	if c.closeStarted {
		c.mu.Unlock()
		<-c.closed // a concurrent Close returns when the first one does
		return nil
	}
	c.closeStarted = true
	defer close(c.closed)
	close(c.closing)
	held := make([]*Lock, 0, len(c.held))
	for l := range c.held {
		held = append(held, l)
	}
	c.mu.Unlock()

	deadline := time.Now().Add(c.cfg.timeout(c.cfg.ttl))
	c.wd.stop()
	var live []*Lock
	for _, l := range held {
		if l.finish(stateReleased, whyClosed) {
			live = append(live, l)
		}
	}
	c.batch(context.Background(), live, nil, deadline, nil, nil, nil)
	c.waits.close()
	c.exp.stop()

	c.mu.Lock()
	c.ioStopped = true
	c.mu.Unlock()
	waitUntil(&c.wg, deadline)
	return nil
}

// waitUntil waits for wg, or until deadline.
func waitUntil(wg *sync.WaitGroup, deadline time.Time) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
