package node

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
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
//     commands in order, and an error that ends the whole pipeline (a
//     hook's, a dial's) goes to every command without a reply.
//   - Its own end: a call whose ctx has ended before its turn is never
//     sent (next leaves it for its own goroutine to take out); one whose
//     ctx ends while its batch is on the wire returns the ctx's error then,
//     its outcome unknown, as an inline call does when its socket deadline
//     fires. The batch is led by the call whose deadline is latest, and
//     bounded by it (or by the node timeout, for a leader without one): the
//     leader returns with the batch, and no call's cancellation ends the
//     batch for the others.
//   - No wait behind a held-up call: a turn that has not come within
//     turnWait (three round trips; see turnWaitMin) sends the call alone
//     (a connection stalled, writes held by CLIENT PAUSE WRITE), and a call
//     sent as EVALSHA_RO or EVAL_RO always goes alone, since in a batch
//     behind a held write it would be held too.
//   - No replay: go-redis does not retry a batch (see bounded).
type combiner struct {
	mu      sync.Mutex
	sending int       // calls and batches on the wire
	waiting []*queued // calls waiting for a turn, oldest first

	timeout time.Duration // the node timeout
	batches *redis.Client // the clone the batches go to
	rtt     atomic.Int64  // a moving average of answered calls' times, ns
}

// sendingMax is how many calls, or batches, of one client are on the wire
// before a new call waits to go out with others. A bound of 2 gained 16
// and 32 goroutines as much as 4 does, but cost 4 goroutines a third of
// their pairs per second: their calls waited for turns where alone they
// would have overlapped. With 4, no number of goroutines measured lost
// (BENCHMARKS.md, "Tenth round").
const sendingMax = 4

// turnWaitMin and turnWaitMax bound how long a call waits for its turn
// before it goes alone: three times the moving average of the calls'
// round trips, so that a server farther away than a round trip of 2ms
// still batches, and a stalled connection holds up the calls behind it
// for little more than what a round trip takes; and no more than a tenth
// of the node timeout, so that on a loaded machine, whose round trips
// grow, the wait does not eat the call's own bound (of 100ms, the shortest
// node timeout, it waits 10ms at most). turnWaitMin is a variable for the
// tests, which hold calls in the queue for as long as they need.
var turnWaitMin = 2 * time.Millisecond

const turnWaitMax = 100 * time.Millisecond

// turnWait is how long a call waits for its turn now.
func (c *combiner) turnWait() time.Duration {
	return min(max(turnWaitMin, 3*time.Duration(c.rtt.Load())), max(min(turnWaitMax, c.timeout/10), turnWaitMin))
}

// took adds the time an answered call, or batch, took to the moving
// average (a racy update may lose a sample; it is an estimate).
func (c *combiner) took(d time.Duration) {
	old := time.Duration(c.rtt.Load())
	if old == 0 {
		c.rtt.Store(int64(d))
		return
	}
	c.rtt.Store(int64(old + (d-old)/8))
}

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

	t := GetTimer(c.turnWait())
	defer PutTimer(t)
	var batch []*queued
	answered := true
	select {
	case batch = <-q.turn:
	case <-t.C:
		waited, leads := c.out(q, true)
		if waited {
			return b.alone(ctx, bc) // no turn came: the wire is held up
		}
		batch, answered = turn(ctx, q, leads)
	case <-ctx.Done():
		waited, leads := c.out(q, false)
		if waited {
			return ended(ctx, bc) // nothing was sent
		}
		batch, answered = turn(ctx, q, leads)
	}
	if !answered {
		return ended(ctx, bc) // q is its batch's until the batch answers
	}
	if batch != nil {
		b.lead(q, batch)
	}
	q.ctx, q.cmd, q.leads = nil, nil, false
	queuedPool.Put(q)
	return &bc.Cmd
}

// alone sends bc by itself, one of the calls counted on the wire.
func (b *BoundedClient) alone(ctx context.Context, bc *boundedCmd) *redis.Cmd {
	defer b.next() // also when a hook panics
	start := time.Now()
	if b.Client.Process(ctx, bc) == nil {
		b.comb.took(time.Since(start))
	}
	return &bc.Cmd
}

// out takes q out of the waiting calls, counting it on the wire when
// sending, and says whether it was still there; if not, next took it into
// a batch, and leads says whether q leads that batch.
func (c *combiner) out(q *queued, sending bool) (waited, leads bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.waiting, q)
	if i < 0 {
		return false, q.leads
	}
	c.waiting = slices.Delete(c.waiting, i, i+1)
	if sending {
		c.sending++
	}
	q.ctx, q.cmd = nil, nil
	queuedPool.Put(q)
	return true, false
}

// turn waits for the turn of q, which next took into a batch: the batch
// itself when q leads it (on its way), nil when another call's batch
// answered for q. When ctx ends first, answered is false: q then stays the
// batch's, never reused.
func turn(ctx context.Context, q *queued, leads bool) (batch []*queued, answered bool) {
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
// hooks to the batches' clone, tells the others their replies came, and
// hands the turn on (next). q's is the batch's latest deadline (next chose
// it so), and no call's cancellation ends the batch for the others.
func (b *BoundedClient) lead(q *queued, batch []*queued) {
	defer b.next()
	defer func() { // also when a hook panics
		for _, x := range batch {
			if x != q {
				x.turn <- nil
			}
		}
	}()
	if len(batch) == 1 {
		_ = b.Client.Process(q.ctx, q.cmd) // no pipeline for one call
		return
	}
	until, ok := q.ctx.Deadline()
	if !ok {
		until = time.Now().Add(b.comb.timeout)
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(q.ctx), until)
	defer cancel()
	ctx = context.WithValue(ctx, divertPipeline{}, b.comb.batches)
	start := time.Now()
	_, err := b.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, x := range batch {
			_ = p.Process(ctx, x.cmd)
		}
		return nil
	})
	if err == nil {
		b.comb.took(time.Since(start))
		return
	}
	for _, x := range batch {
		// A reply, nil included (redis.Nil), comes with a value or an
		// error: a command with neither was not answered.
		if x.cmd.Err() == nil && x.cmd.Val() == nil {
			x.cmd.SetErr(err)
		}
	}
}

// next gives the calls that wait for their turn, up to batchMax, to one of
// them to lead: the one whose ctx ends last (or never), so that every other
// one can still end by its own ctx. A call whose ctx has ended stays for
// its own goroutine to take out: it is never sent. With none to send, it
// counts one call fewer on the wire.
func (b *BoundedClient) next() {
	c := b.comb
	c.mu.Lock()
	var batch []*queued
	kept := c.waiting[:0]
	for _, q := range c.waiting {
		if len(batch) < batchMax && q.ctx.Err() == nil {
			batch = append(batch, q)
		} else {
			kept = append(kept, q)
		}
	}
	clear(c.waiting[len(kept):])
	c.waiting = kept
	if len(batch) == 0 {
		c.sending--
		c.mu.Unlock()
		return
	}
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
