package redlock

import (
	"container/heap"
	"time"
)

// slot is a lock's place in one timeHeap: when it is due there, and at which
// index it sits (-1 when not queued). Each heap's mutex guards its slots.
type slot struct {
	at    time.Time
	index int
}

// timeHeap is a min-heap of locks by the time in one of their slots: the
// watchdog's renewals, the loss clock's expiries. A lock is queued at most
// once per heap and moves in O(log n).
type timeHeap struct {
	locks []*Lock
	slot  func(*Lock) *slot
}

func (h *timeHeap) Len() int { return len(h.locks) }

func (h *timeHeap) Less(i, j int) bool { return h.slot(h.locks[i]).at.Before(h.slot(h.locks[j]).at) }

func (h *timeHeap) Swap(i, j int) {
	h.locks[i], h.locks[j] = h.locks[j], h.locks[i]
	h.slot(h.locks[i]).index = i
	h.slot(h.locks[j]).index = j
}

func (h *timeHeap) Push(x any) {
	l := x.(*Lock)
	h.slot(l).index = len(h.locks)
	h.locks = append(h.locks, l)
}

func (h *timeHeap) Pop() any {
	n := len(h.locks) - 1
	l := h.locks[n]
	h.locks[n] = nil
	h.locks = h.locks[:n]
	h.slot(l).index = -1
	return l
}

// set queues l at at, or moves it there.
func (h *timeHeap) set(l *Lock, at time.Time) {
	s := h.slot(l)
	s.at = at
	if s.index >= 0 {
		heap.Fix(h, s.index)
	} else {
		heap.Push(h, l)
	}
}

func (h *timeHeap) remove(l *Lock) {
	if s := h.slot(l); s.index >= 0 {
		heap.Remove(h, s.index)
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
		if i >= len(h.locks) || h.slot(h.locks[i]).at.After(horizon) {
			continue
		}
		n++
		stack = append(stack, 2*i+1, 2*i+2)
	}
	return n
}

// head returns the earliest lock and its time; ok is false when empty.
func (h *timeHeap) head() (l *Lock, at time.Time, ok bool) {
	if len(h.locks) == 0 {
		return nil, time.Time{}, false
	}
	return h.locks[0], h.slot(h.locks[0]).at, true
}

func (h *timeHeap) pop() *Lock { return heap.Pop(h).(*Lock) }

// farFuture stands for "nothing planned": any earlier time wakes a loop
// waiting on a timeHeap.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
