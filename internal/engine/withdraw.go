package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/scripts"
)

// Unwait takes a writer that gave up waiting out of its name's queue of
// waiting writers (unwait.lua), as every key a failed call set: neither the
// writers behind it nor new read holds wait for its entry to lapse, and a
// name already passed to it passes on. It runs before its Lock call
// returns, except when the caller's ctx ended (leave): that call returns at
// once and this one runs from a goroutine of the core. The call is bounded
// by the node timeout like every other, and the entry lapses by itself
// (5s) if it fails.
//
// After Close, when the core may start no goroutine, it still runs, from the
// caller's goroutine (as releaseOn does): a closed Locker's waiters must not
// leave entries that a release would reserve the name for.
func Unwait(ctx context.Context, p *Pool, w Withdrawal) {
	keys := []string{w.Tag + scripts.QueueSuffix, w.Tag}
	timeout := w.Timeout
	call := func(ctx context.Context, n *node.Node, cl node.Client) Reply {
		return Reply{Err: scripts.Sharded(scripts.Unwait, w.sharded).Run(ctx, cl, keys, w.ID, w.Channel, ttlMillis(timeout)).Err()}
	}
	if _, _, err := p.Round(Detached(ctx), p.Nodes, timeout, timeout, call, time.Now().Add(timeout), nil, Never); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		call(cctx, p.Nodes[0], p.Nodes[0].ClientFor(timeout))
	}
}

// Withdrawal is what unwait needs of a waiting writer's acquisition: a
// value, so that running it from a goroutine moves nothing of the Lock
// call's to the heap.
type Withdrawal struct {
	Tag, ID, Channel string
	Timeout          time.Duration
	sharded          bool
}

// withdrawals tracks the unwait calls still on their way for each release
// channel, so that a release of the same name by the same core waits for
// them: release.lua reserves a name for the first writer in its queue, and
// one that gave up must not be it. Empty, it costs a release one atomic
// load.
type withdrawals struct {
	N  atomic.Int32 // calls on their way, all names
	mu sync.Mutex
	m  map[string]*pendingWithdrawals
}

type pendingWithdrawals struct {
	calls int
	done  chan struct{} // closed when calls drops to 0
}

// begin registers a withdrawal on channel; the func it returns ends it.
func (w *withdrawals) begin(channel string) func() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]*pendingWithdrawals{}
	}
	e := w.m[channel]
	if e == nil {
		e = &pendingWithdrawals{done: make(chan struct{})}
		w.m[channel] = e
	}
	e.calls++
	w.N.Add(1)
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.N.Add(-1)
		if e.calls--; e.calls == 0 {
			close(e.done)
			delete(w.m, channel)
		}
	}
}

// wait returns once no withdrawal on channel is on its way, or at limit.
func (w *withdrawals) wait(channel string, limit time.Duration) {
	if w.N.Load() == 0 {
		return
	}
	w.mu.Lock()
	e := w.m[channel]
	w.mu.Unlock()
	if e == nil {
		return
	}
	t := node.GetTimer(limit)
	defer node.PutTimer(t)
	select {
	case <-e.done:
	case <-t.C:
	}
}
