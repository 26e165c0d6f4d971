package engine

import (
	"time"

	"github.com/redlockgo/redlock/internal/node"
)

// Where the tracker's renewals and reads go: a node's data connection while
// it is up (its reads keep their keys armed, and its renewals are silent),
// the pool while it is down; once it is back, what was read through the
// pool meanwhile is read on it again.

// dataRoutes are, by node, the clients a renewal round uses instead of the
// nodes': a data connection, or nil for the pool.
type dataRoutes struct {
	t       *Tracker
	clients []node.Client
}

// on reports whether node idx's renewals go to its data connection.
func (r *dataRoutes) on(idx int) bool { return r != nil && r.clients[idx] != nil }

// routes is where a renewal round goes: the data connection where it is up
// (its renewals keep their keys armed, and are silent), the pool elsewhere
// (nil routes: the pool everywhere); and the credits an own write through
// those routes needs (none on a data connection).
func (t *Tracker) routes() (via *dataRoutes, credit uint64) {
	if t == nil || !t.on.Load() {
		return nil, 0
	}
	credit = creditMask(t.nodes)
	if !t.Armed.Load() {
		return nil, credit
	}
	for i, tc := range t.byNode {
		dc := tc.dataClient()
		if dc == nil {
			continue
		}
		if via == nil {
			via = &dataRoutes{t: t, clients: make([]node.Client, t.nodes)}
		}
		tc.hooks.KeepInnermost()
		via.clients[i] = dc.via
		if i < creditNodes {
			credit &^= 0xff << (8 * i)
		}
	}
	return via, credit
}

// readVia is verify's via: the data connections that are up; down says
// that some node has one that is down (a read through the pool there does
// not arm).
func (t *Tracker) readVia() (via []node.Client, down bool) {
	for i, tc := range t.byNode {
		if tc == nil {
			continue
		}
		if dc := tc.dataClient(); dc != nil {
			if via == nil {
				via = make([]node.Client, t.nodes)
			}
			tc.hooks.KeepInnermost()
			via[i] = dc.via
		} else if dc := tc.Data.Load(); dc != nil && !tc.gone.Load() {
			down = true
		}
	}
	return via, down
}

// armUnarmed makes the locks read while a data connection was down
// suspect, to be read (armed) on it.
func (t *Tracker) armUnarmed() {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	for l := range t.unarmed {
		t.Suspect[l] = struct{}{}
	}
	clear(t.unarmed)
	if len(t.Suspect) > 0 {
		t.reader.wake()
	}
}

// DataDone records a call on the data connection that cl is, which ended
// in err: an error of the connection puts it down.
func (t *Tracker) dataDone(cl node.Client, err error) {
	if t == nil {
		return
	}
	for _, tc := range t.Conns {
		if dc := tc.Data.Load(); dc != nil && node.Client(dc.via) == cl {
			dc.used.Store(time.Now().UnixNano())
			dc.failed(err)
		}
	}
}
