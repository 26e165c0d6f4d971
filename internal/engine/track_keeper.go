package engine

import "time"

// FollowEvery is how often, while armed, the keeper checks that a
// Sentinel client's master is still where the listener is, and tries a
// data connection that is down.
const FollowEvery = 250 * time.Millisecond

// IdlePing is how long a data connection may go unused before the keeper
// pings it (a PING, whose only use is to find a connection killed while
// idle). Renewals every TTL/3 of a few locks keep it busier than that.
const IdlePing = time.Second

// keeper opens the tracker's connections once a lock has been held for
// ArmAfter, and closes them after DisarmAfter with no lock held; while they
// are open, it moves a Sentinel client's listener to a new master and
// probes the data connections. Its run is one goroutine of the tracker's,
// the only one that subscribes and closes the listeners (trackConn's ps
// and stop) and sets the tracker's armed; wake is safe for concurrent use.
type keeper struct {
	t    *Tracker
	held chan struct{} // buffered 1: a lock became held
}

// wake tells run that a lock became held.
func (k *keeper) wake() {
	select {
	case k.held <- struct{}{}:
	default:
	}
}

// run opens the tracking connections once a lock has been held for
// ArmAfter, and closes them after DisarmAfter with no lock held, until
// Close.
func (k *keeper) run() {
	t := k.t
	defer t.life.WG.Done()
	defer func() {
		k.disarm()
		for _, tc := range t.Conns {
			_ = tc.cl.Close()
		}
	}()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-k.held:
		}
		for !t.Armed.Load() { // bounded: ends when no lock is held
			if !k.pause(ArmAfter) {
				return
			}
			old, any := t.heldSince(time.Now().Add(-ArmAfter).UnixNano())
			if old {
				k.arm()
			} else if !any {
				break
			}
		}
		for idle := 0; t.Armed.Load(); {
			if !k.pause(FollowEvery) {
				return
			}
			k.follow()
			for _, tc := range t.Conns {
				tc.probe()
			}
			if via, down := t.readVia(); via != nil && !down {
				t.armUnarmed() // reads that failed, now that every node's is up
			}
			t.sweep(false)
			if _, any := t.heldSince(0); any {
				idle = 0
			} else if idle++; time.Duration(idle)*FollowEvery >= DisarmAfter {
				k.disarm()
			}
		}
	}
}

// follow moves the listener of a Sentinel client whose master
// changed to the new master, where its subscription then makes every held
// lock suspect.
func (k *keeper) follow() {
	t := k.t
	for _, tc := range t.Conns {
		if tc.ps == nil || !tc.masterMoved(t.ctx) {
			continue
		}
		t.logger.Info("redlock: the master moved; tracking follows it", "node", tc.idx)
		close(tc.stop)
		_ = tc.ps.Close()
		tc.closeData()
		tc.remote.Store(nil)
		if t.life.GoCount(1) {
			tc.ps, tc.stop = tc.cl.Subscribe(t.ctx), make(chan struct{})
			go tc.run(tc.ps, tc.stop)
		} else {
			tc.ps, tc.stop = nil, nil
		}
	}
}

// pause waits d, or reports false at Close.
func (k *keeper) pause(d time.Duration) bool {
	t := k.t
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-t.ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// arm opens the tracking connections. Armed is set first: a lock that
// becomes held from then on is queued for its own arming read (heldNow),
// and one that became held before was watched before the subscriptions
// start, so their read of every held lock reads it. Set after them, a lock
// held in between was read by neither, and a DEL of it went unheard until
// its renewal (seen once on a loaded machine; TestLossHeardWhileArming).
func (k *keeper) arm() {
	t := k.t
	t.Armed.Store(true)
	for _, tc := range t.Conns {
		if tc.gone.Load() || !t.life.GoCount(1) {
			continue
		}
		tc.ps, tc.stop = tc.cl.Subscribe(t.ctx), make(chan struct{}) // connects in run
		go tc.run(tc.ps, tc.stop)
	}
	if t.AfterArm != nil {
		t.AfterArm()
	}
}

// disarm closes them, and drops the locks still to be armed: the next
// arm reads every held lock.
func (k *keeper) disarm() {
	t := k.t
	t.Armed.Store(false)
	for _, tc := range t.Conns {
		if tc.ps != nil {
			close(tc.stop)
			_ = tc.ps.Close()
			tc.ps, tc.stop = nil, nil
		}
		tc.closeData()
	}
	t.Mu.Lock()
	clear(t.Arming)
	t.Arming, t.ArmHead = t.Arming[:0], 0
	clear(t.unarmed)
	t.Mu.Unlock()
	t.sweep(true) // no invalidation can come now
	// A lock that became held after the keeper last looked, and was queued
	// to be armed (Armed was still set), was dropped above: the keeper
	// arms again for it.
	if _, any := t.heldSince(0); any {
		k.wake()
	}
}
