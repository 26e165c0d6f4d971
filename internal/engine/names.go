package engine

import "sync"

// heldNames counts the locks a core holds per lock key: a Lock call does
// not waste an attempt on a name its own process holds, and the local
// queue keeps a contended name subscribed while it is held. Shared by the
// core and its queue.
type heldNames struct {
	mu sync.Mutex
	n  map[string]int
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
