package engine

import (
	"container/heap"
	"time"
)

// Slot is a lock's place in one TimeHeap: the index of its entry (-1 when
// not queued). Each heap's mutex guards its slots.
type Slot struct {
	Index int
}

// TimeHeap is a min-heap of locks by a time: the watchdog's renewals, the
// loss clock's expiries. A lock is queued at most once per heap and moves in
// O(log n). Each entry holds its time, so that ordering reads the heap's own
// array only: with the time in the lock, every comparison read two locks
// scattered in memory, and under -race popping thousands of locks due
// together from a heap of 20,000 cost up to 90µs a pop (the loss clock, see
// takeChunk). container/heap orders it; entries go in and out by index
// (heap.Fix, heap.Remove), never through Push's or Pop's any, which would
// box an entry.
type TimeHeap struct {
	Entries []heapEntry
	Slot    func(*Hold) *Slot
}

type heapEntry struct {
	At time.Time
	L  *Hold
}

func (h *TimeHeap) Len() int { return len(h.Entries) }

func (h *TimeHeap) Less(i, j int) bool { return h.Entries[i].At.Before(h.Entries[j].At) }

func (h *TimeHeap) Swap(i, j int) {
	h.Entries[i], h.Entries[j] = h.Entries[j], h.Entries[i]
	h.Slot(h.Entries[i].L).Index = i
	h.Slot(h.Entries[j].L).Index = j
}

// Push is not used: set appends and fixes.
func (h *TimeHeap) Push(any) { panic("timeHeap: Push") }

// Pop drops the last entry, which heap.Remove has moved there; removeAt
// read it before.
func (h *TimeHeap) Pop() any {
	last := len(h.Entries) - 1
	h.Slot(h.Entries[last].L).Index = -1
	h.Entries[last] = heapEntry{}
	h.Entries = h.Entries[:last]
	return nil
}

// Set queues l at at, or moves it there.
func (h *TimeHeap) Set(l *Hold, at time.Time) {
	s := h.Slot(l)
	if s.Index < 0 {
		s.Index = len(h.Entries)
		h.Entries = append(h.Entries, heapEntry{L: l})
	}
	h.Entries[s.Index].At = at
	heap.Fix(h, s.Index)
}

// removeAt takes entry i out of the heap and returns its lock.
func (h *TimeHeap) removeAt(i int) *Hold {
	l := h.Entries[i].L
	heap.Remove(h, i)
	return l
}

func (h *TimeHeap) Remove(l *Hold) {
	if i := h.Slot(l).Index; i >= 0 {
		h.removeAt(i)
	}
}

// CountBy counts the locks queued at or before horizon, walking only the
// part of the heap they occupy (with its boundary).
func (h *TimeHeap) CountBy(horizon time.Time) int {
	n := 0
	var buf [64]int
	stack := append(buf[:0], 0)
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if i >= len(h.Entries) || h.Entries[i].At.After(horizon) {
			continue
		}
		n++
		stack = append(stack, 2*i+1, 2*i+2)
	}
	return n
}

// Head returns the earliest lock and its time; ok is false when empty.
func (h *TimeHeap) Head() (l *Hold, at time.Time, ok bool) {
	if len(h.Entries) == 0 {
		return nil, time.Time{}, false
	}
	return h.Entries[0].L, h.Entries[0].At, true
}

// PopHead removes and returns the earliest lock.
func (h *TimeHeap) PopHead() *Hold { return h.removeAt(0) }

// farFuture stands for "nothing planned": any earlier time wakes a loop
// waiting on a TimeHeap.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
