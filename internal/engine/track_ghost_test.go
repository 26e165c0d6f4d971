package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bookOnly is a tracker with its book and nothing else (no connections,
// no goroutines): armed, so that a released lock leaves its credits.
func bookOnly() *Tracker {
	t := &Tracker{nodes: 1, watched: map[string]watchers{}, ghosts: map[string]ghost{},
		Suspect: map[*Hold]struct{}{}, unarmed: map[*Hold]struct{}{}}
	t.reader = suspectReader{t: t, kick: make(chan struct{}, 1)}
	t.on.Store(true)
	t.Armed.Store(true)
	return t
}

// TestGhostCreditsLapseEach: the credits released locks leave on a key
// lapse each on its own clock, as they did while the locks themselves
// stayed in the book: a later release on a busy name does not keep an
// earlier one's unused credits alive, so an outside change after they
// lapsed is counted as one, and held locks on the key are read.
func TestGhostCreditsLapseEach(t *testing.T) {
	tr := bookOnly()
	release := func() *Hold {
		l := &Hold{Kind: KindExclusive, Keys: []string{"{k}", "{k}:fence"}}
		tr.watch(l)
		tr.expect(l) // its acquisition
		tr.settle(l, true)
		tr.expect(l) // its release
		tr.settle(l, true)
		tr.retire(l)
		return l
	}
	release() // A: two credits, never heard (nobody read its key)
	g := tr.ghosts["{k}"]
	require.True(t, g.live(time.Now().UnixNano()), "A's credits, live")
	release() // B
	g = tr.ghosts["{k}"]
	require.NotZero(t, g[1].credits, "B in the second slot, A's still in the first")
	g[0].until = time.Now().UnixNano() - 1 // A's lapse comes, on its own clock
	tr.ghosts["{k}"] = g
	tr.invalidated(0, []string{"{k}"}) // B's release heard
	tr.invalidated(0, []string{"{k}"}) // and its acquisition
	assert.Zero(t, tr.Outside.Load(), "B's own writes taken for outside changes")
	held := &Hold{Kind: KindExclusive, Keys: []string{"{k}", "{k}:fence"}}
	tr.watch(held)
	held.trk.heldAt.Store(time.Now().UnixNano())
	tr.invalidated(0, []string{"{k}"}) // an outside DEL
	assert.Equal(t, int64(1), tr.Outside.Load(), "an outside change after A's credits lapsed")
	assert.Contains(t, tr.Suspect, held, "the held lock on the key is read")
	tr.sweep(false)
	assert.Empty(t, tr.ghosts, "no live credit left: the key's ghost goes")
}

// TestGhostSlots: a key keeps the credits of its last ghostSlots released
// locks; a new one takes a lapsed or spent slot first, else the oldest.
func TestGhostSlots(t *testing.T) {
	now := time.Now().UnixNano()
	var g ghost
	for i := range ghostSlots + 2 {
		g = g.with(1, now+int64(i+1)*int64(time.Second), now)
	}
	for i := range ghostSlots {
		assert.Greater(t, g[i].until, now+2*int64(time.Second), "slot %d holds one of the last %d", i, ghostSlots)
	}
	for range ghostSlots {
		require.True(t, g.take(0, now))
	}
	assert.False(t, g.take(0, now), "every credit spent")
	assert.False(t, g.live(now))
	assert.False(t, g.take(creditNodes, now), "a node past creditNodes has no credits")
}
