package redlock

import (
	"container/heap"
	"time"
)

// slot is a lock's place in one timeHeap: the index of its entry (-1 when
// not queued). Each heap's mutex guards its slots.
type slot struct {
	index int
}

// timeHeap is a min-heap of locks by a time: the watchdog's renewals, the
// loss clock's expiries. A lock is queued at most once per heap and moves in
// O(log n). Each entry holds its time, so that ordering reads the heap's own
// array only: with the time in the lock, every comparison read two locks
// scattered in memory, and under -race popping thousands of locks due
// together from a heap of 20,000 cost up to 90µs a pop (the loss clock, see
// takeChunk). container/heap orders it; entries go in and out by index
// (heap.Fix, heap.Remove), never through Push's or Pop's any, which would
// box an entry.
type timeHeap struct {
	entries []heapEntry
	slot    func(*hold) *slot
}

type heapEntry struct {
	at time.Time
	l  *hold
}

func (h *timeHeap) Len() int { return len(h.entries) }

func (h *timeHeap) Less(i, j int) bool { return h.entries[i].at.Before(h.entries[j].at) }

func (h *timeHeap) Swap(i, j int) {
	h.entries[i], h.entries[j] = h.entries[j], h.entries[i]
	h.slot(h.entries[i].l).index = i
	h.slot(h.entries[j].l).index = j
}

// Push is not used: set appends and fixes.
func (h *timeHeap) Push(any) { panic("timeHeap: Push") }

// Pop drops the last entry, which heap.Remove has moved there; removeAt
// read it before.
func (h *timeHeap) Pop() any {
	last := len(h.entries) - 1
	h.slot(h.entries[last].l).index = -1
	h.entries[last] = heapEntry{}
	h.entries = h.entries[:last]
	return nil
}

// set queues l at at, or moves it there.
func (h *timeHeap) set(l *hold, at time.Time) {
	s := h.slot(l)
	if s.index < 0 {
		s.index = len(h.entries)
		h.entries = append(h.entries, heapEntry{l: l})
	}
	h.entries[s.index].at = at
	heap.Fix(h, s.index)
}

// removeAt takes entry i out of the heap and returns its lock.
func (h *timeHeap) removeAt(i int) *hold {
	l := h.entries[i].l
	heap.Remove(h, i)
	return l
}

func (h *timeHeap) remove(l *hold) {
	if i := h.slot(l).index; i >= 0 {
		h.removeAt(i)
	}
}

// countBy counts the locks queued at or before horizon, walking only the
// part of the heap they occupy (with its boundary).
func (h *timeHeap) countBy(horizon time.Time) int {
	n := 0
	var buf [64]int
	stack := append(buf[:0], 0)
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if i >= len(h.entries) || h.entries[i].at.After(horizon) {
			continue
		}
		n++
		stack = append(stack, 2*i+1, 2*i+2)
	}
	return n
}

// head returns the earliest lock and its time; ok is false when empty.
func (h *timeHeap) head() (l *hold, at time.Time, ok bool) {
	if len(h.entries) == 0 {
		return nil, time.Time{}, false
	}
	return h.entries[0].l, h.entries[0].at, true
}

func (h *timeHeap) pop() *hold { return h.removeAt(0) }

// farFuture stands for "nothing planned": any earlier time wakes a loop
// waiting on a timeHeap.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
