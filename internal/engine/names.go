package engine

import "sync"

// heldNames counts the locks a core holds per lock key, and the first
// attempts of its Lock calls on the wire: a Lock call does not waste an
// attempt on a name its own process holds or is already trying for (it
// queues behind that attempt instead, see obtaining.run), and the local
// queue keeps a contended name subscribed while it is held. Shared by the
// core and its queue.
type heldNames struct {
	mu     sync.Mutex
	n      map[string]int
	trying map[string]bool // a Lock call's first attempt on key is on the wire
}

// add counts d more (or, negative, fewer) locks on key.
func (h *heldNames) add(key string, d int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n[key] += d; h.n[key] <= 0 {
		delete(h.n, key)
	}
}

// has reports whether a lock of the core holds key.
func (h *heldNames) has(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[key] > 0
}

// tryFirst reports whether a Lock call may send its first attempt on key:
// the core neither holds key nor has a first attempt on it on the wire. It
// then counts that attempt as on the wire until doneFirst.
func (h *heldNames) tryFirst(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n[key] > 0 || h.trying[key] {
		return false
	}
	if h.trying == nil {
		h.trying = make(map[string]bool)
	}
	h.trying[key] = true
	return true
}

// doneFirst ends the first attempt on key that tryFirst allowed.
func (h *heldNames) doneFirst(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.trying, key)
}

// firstOnWire reports whether a first attempt on key is on the wire.
func (h *heldNames) firstOnWire(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.trying[key]
}
