package engine

import "sync/atomic"

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
	// kept: retired with a write in flight, and so still watched (the
	// tracker's kept; under its mu).
	kept bool
}

// ghost is what the last few released locks of a key left: each one's
// credits (lockTrack's form) that may still absorb an invalidation, until
// they lapse (UnixNano), each on its own clock as when the lock itself was
// kept. A key has one tracked read at a time, so one write's invalidation
// at a time in flight: ghostSlots is ample, and a busy name's older
// credits go first.
type ghost [ghostSlots]ghostSlot

const ghostSlots = 4

// ghostSlot is one released lock's credits and their lapse.
type ghostSlot struct {
	credits uint64
	until   int64
}

// with is g with a released lock's credits and lapse, in the slot of a
// lapsed or spent one, else of the one that lapses first.
func (g ghost) with(credits uint64, until, now int64) ghost {
	slot := 0
	for i, s := range g {
		if s.credits == 0 || now >= s.until {
			slot = i
			break
		}
		if s.until < g[slot].until {
			slot = i
		}
	}
	g[slot] = ghostSlot{credits, until}
	return g
}

// take consumes one credit of node from the live slot of g that lapses
// first, and reports whether there was one.
func (g *ghost) take(node int, now int64) bool {
	if node >= creditNodes {
		return false
	}
	shift, slot := 8*node, -1
	for i, s := range g {
		if now < s.until && s.credits>>shift&0xff != 0 && (slot < 0 || s.until < g[slot].until) {
			slot = i
		}
	}
	if slot < 0 {
		return false
	}
	g[slot].credits -= 1 << shift
	return true
}

// live reports whether g has a credit that may still be spent.
func (g *ghost) live(now int64) bool {
	for _, s := range g {
		if s.credits != 0 && now < s.until {
			return true
		}
	}
	return false
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

// live reports whether l has credits that may still be spent.
func (k *lockTrack) live(now int64) bool {
	return k.credits.Load() != 0 && (k.inflight.Load() > 0 || now < k.until.Load())
}
