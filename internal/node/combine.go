package node

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// combiner shares round trips among the script calls of one BoundedClient
// that overlap: while sendingMax calls are on the wire, a new call waits
// for one of them to answer, and then the calls that waited meanwhile go
// out together, one pipeline on one connection. Redis reads and answers
// them with one system call each way instead of one per call, and so does
// the client: at 16 goroutines a pair of ours then costs the server less
// CPU than a bsm/redislock pair (BENCHMARKS.md, "Tenth round"). A call that
// finds fewer than sendingMax on the wire goes out at once, alone: a lone
// caller, a few, or a Redlock's one call per master wait for nobody.
//
// What a call keeps:
//   - Its own reply and error: a pipeline's replies are matched to its
//     commands in order.
//   - Its own end: a call whose ctx ends while it waits for its turn is
//     taken out and never sent; one whose ctx ends while its batch is on
//     the wire returns the ctx's error then, its outcome unknown, as an
//     inline call does when its socket deadline fires. The batch is led,
//     and bounded, by the call whose deadline is latest (each call's is
//     its node timeout at most), and no call's cancellation ends it for the
//     others.
//   - No wait behind a held-up call: a turn that has not come within
//     turnWait (a connection stalled, writes held by CLIENT PAUSE WRITE)
//     sends the call alone, and a read-only script (EVALSHA_RO) always goes
//     alone, since in a batch behind a held write it would be held too.
type combiner struct {
	mu      sync.Mutex
	sending int       // calls and batches on the wire
	waiting []*queued // calls waiting for a turn, oldest first
}

// sendingMax is how many calls, or batches, of one client are on the wire
// before a new call waits to go out with others. With 2, 16 and 32
// goroutines gained as much as with 4, but 4 goroutines lost a third of
// their pairs per second, their calls waiting for turns where alone they
// would have overlapped; with 4 no number of goroutines measured lost
// (BENCHMARKS.md, "Tenth round").
const sendingMax = 4

// turnWait is how long a call waits for its turn before it goes alone: a
// turn comes when a call on the wire answers, which on a healthy server
// takes a round trip, and a call held up longer (a connection stalled, a
// script CLIENT PAUSE holds) must not hold up the calls queued behind it.
var turnWait = 2 * time.Millisecond

// batchMax bounds one batch: the rest of a longer queue waits for the next
// turn, so that a batch's last reply is not held up behind an unbounded
// number of others.
const batchMax = 64

// queued is a call waiting for its turn.
type queued struct {
	ctx context.Context
	cmd *boundedCmd
	// turn receives the batch this call leads, or nil once another call's
	// batch answered for it.
	turn chan []*queued
	// leads is set, under the combiner's lock, when next gives this call
	// a batch to lead: its turn is then on its way.
	leads bool
}

var queuedPool = sync.Pool{New: func() any { return &queued{turn: make(chan []*queued, 1)} }}

// send sends bc through b's client, alone or in a batch (see combiner),
// and returns the command that holds its reply: bc's, or a new one holding
// ctx's error when ctx ended before bc's reply came.
func (b *BoundedClient) send(ctx context.Context, bc *boundedCmd) *redis.Cmd {
	c := b.comb
	if name := bc.Name(); c == nil || (name != "evalsha" && name != "eval") {
		// A read-only script (EVALSHA_RO) goes alone: in a batch behind a
		// write that CLIENT PAUSE WRITE holds, it would be held too.
		_ = b.Client.Process(ctx, bc)
		return &bc.Cmd
	}
	c.mu.Lock()
	if c.sending < sendingMax {
		c.sending++
		c.mu.Unlock()
		return b.alone(ctx, bc)
	}
	q := queuedPool.Get().(*queued)
	q.ctx, q.cmd = ctx, bc
	c.waiting = append(c.waiting, q)
	c.mu.Unlock()

	t := GetTimer(turnWait)
	defer PutTimer(t)
	var batch []*queued
	answered := true
	select {
	case batch = <-q.turn:
	case <-t.C:
		if c.out(q, true) {
			return b.alone(ctx, bc) // no turn came: the wire is held up
		}
		batch, answered = b.turn(ctx, q)
	case <-ctx.Done():
		if c.out(q, false) {
			return ended(ctx, bc) // nothing was sent
		}
		batch, answered = b.turn(ctx, q)
	}
	if !answered {
		return ended(ctx, bc) // q is its batch's until the batch answers
	}
	if batch != nil {
		b.lead(q, batch)
		b.next()
	}
	q.ctx, q.cmd, q.leads = nil, nil, false
	queuedPool.Put(q)
	return &bc.Cmd
}

// alone sends bc by itself, one of the calls counted on the wire.
func (b *BoundedClient) alone(ctx context.Context, bc *boundedCmd) *redis.Cmd {
	_ = b.Client.Process(ctx, bc)
	b.next()
	return &bc.Cmd
}

// out takes q out of the waiting calls, and says whether it was still
// there; counting it on the wire when sending.
func (c *combiner) out(q *queued, sending bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.waiting, q)
	if i < 0 {
		return false
	}
	c.waiting = slices.Delete(c.waiting, i, i+1)
	if sending {
		c.sending++
	}
	q.ctx, q.cmd = nil, nil
	queuedPool.Put(q)
	return true
}

// turn waits for the turn of q, which next took into a batch: the batch
// itself when q leads it (on its way), nil when another call's batch
// answered for q. When ctx ends first, answered is false: q then stays the
// batch's, never reused.
func (b *BoundedClient) turn(ctx context.Context, q *queued) (batch []*queued, answered bool) {
	b.comb.mu.Lock()
	leads := q.leads
	b.comb.mu.Unlock()
	if leads {
		return <-q.turn, true
	}
	select {
	case batch := <-q.turn:
		return batch, true
	case <-ctx.Done():
		return nil, false
	}
}

// ended is what a call whose ctx ended before its reply returns: a command
// of its own holding ctx's error (the batch still writes bc's reply).
func ended(ctx context.Context, bc *boundedCmd) *redis.Cmd {
	cmd := redis.NewCmd(ctx, bc.Args()...)
	cmd.SetErr(ctx.Err())
	return cmd
}

// lead sends batch, which q leads, as one pipeline through the client's
// hooks to the clone, and tells the others their replies came. q's is the
// batch's latest deadline (next chose it so), and no call's cancellation
// ends the batch for the others.
func (b *BoundedClient) lead(q *queued, batch []*queued) {
	if len(batch) == 1 {
		_ = b.Client.Process(q.ctx, q.cmd) // no pipeline for one call
		return
	}
	ctx := context.WithValue(context.WithoutCancel(q.ctx), divertPipeline{}, b.clone)
	if d, ok := q.ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d)
		defer cancel()
	} // else bounded by the clone's socket timeouts
	_, _ = b.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, x := range batch {
			_ = p.Process(ctx, x.cmd)
		}
		return nil
	})
	for _, x := range batch {
		if x != q {
			x.turn <- nil
		}
	}
}

// next gives the calls that waited their turn, up to batchMax, to one of
// them to lead: the one whose ctx ends last (or never), so that every other
// one can still end by its own ctx. With none waiting, it counts one call
// fewer on the wire.
func (b *BoundedClient) next() {
	c := b.comb
	c.mu.Lock()
	if len(c.waiting) == 0 {
		c.sending--
		c.mu.Unlock()
		return
	}
	n := min(len(c.waiting), batchMax)
	batch := slices.Clone(c.waiting[:n])
	c.waiting = slices.Delete(c.waiting, 0, n)
	leader, last := batch[0], time.Time{}
	for _, q := range batch {
		d, ok := q.ctx.Deadline()
		if !ok {
			leader = q
			break
		}
		if d.After(last) {
			leader, last = q, d
		}
	}
	leader.leads = true
	c.mu.Unlock()
	leader.turn <- batch
}
