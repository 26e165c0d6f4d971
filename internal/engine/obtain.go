package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/pubsub"
)

// run drives a waiting acquisition: attempts until one succeeds, ctx ends
// or the retry policy gives up, waiting in between for a release message,
// a hand-off or a timer: attempt, plan the sleep, wait.
func (o *obtaining) run(ctx context.Context) (l *Hold, err error) {
	c, a := o.c, o.a
	o.tr = NewAcquireTrace(ctx, a.Cfg, a.Name, true)
	defer func() { o.tr.Done(l, err) }()
	// FIFO within this core: no attempt while others of ours wait or hold the
	// name; queue behind them instead (see queue.go). An uncontended Lock
	// never touches pub/sub: it subscribes only after a failed attempt.
	// A policy that allows no wait at all (NoRetry) makes its one attempt
	// whatever this process holds, so the caller hears from the server who
	// holds the name (a TakenError), as from any other process.
	// One first attempt per name at a time, too: a Lock call that finds
	// another one's first attempt on the wire queues behind it instead of
	// sending its own, which the server would refuse while the other holds
	// the name, entering it in the name's queue of waiting writers and
	// marking the name waited for (so that later releases publish). A burst
	// of goroutines on a free name then costs one attempt, and hand-offs.
	switch {
	case a.Cfg.Retry(0) < 0:
		o.try = true
	case c.Waits.Busy(a.Queue):
	case a.Held == "":
		o.try = true
	default:
		o.try = c.names.tryFirst(a.Held)
		o.first = o.try
	}
	// A channel already confirmed subscribed before the first attempt (a
	// name this process waits for often) hears any release after it: the
	// first wait can trust messages instead of polling.
	// The count first: a message between the two reads makes missed report
	// it, never hides it.
	o.heardSeq = c.Waits.seq(channelOf(a.Queue))
	o.warm = c.Waits.PS.Listening(channelOf(a.Queue))
	defer func() { err = o.leave(ctx, err) }()
	defer o.endFirst() // before leave: a withdrawal can take a node timeout
	for attempt := 0; ; attempt++ {
		if o.try {
			if l, err, done := o.attemptOnce(ctx, attempt); done {
				return l, err
			}
		}
		o.try = true
		o.queue(ctx)
		o.endFirst() // queued: the calls behind it may try when at the head
		if a.Kind == KindExclusive {
			c.Waits.heldBy(channelOf(o.qk), o.firm)
		}
		d, trusted, ok := o.sleepFor(attempt)
		if !ok {
			return nil, o.last() // the retry policy gave up (LimitRetry, NoRetry)
		}
		woke, handed, err := o.await(ctx, d)
		switch {
		case err != nil:
			return nil, Say.Join(o.last(), err)
		case handed != nil:
			o.acquired = true
			return handed, nil
		}
		o.woke = woke
		if woke == wokeTimer && trusted && d < o.hint {
			o.woke = wokeEarly
		}
		if woke == wokeMessage && o.contested {
			if err := o.jitter(ctx); err != nil {
				return nil, Say.Join(o.last(), err)
			}
		}
	}
}

// jitter waits a random while before the attempt that follows a release
// message when the last attempt found the name split between contenders:
// their failed attempts withdraw their grants at the same moment, and each
// withdrawal wakes the others, so without it they would retry in step and
// split the masters again (the Redlock spec's random delay). The wait is
// up to four times what the last attempt took, at least a millisecond.
func (o *obtaining) jitter(ctx context.Context) error {
	t := time.NewTimer(rand.N(max(4*o.took, time.Millisecond)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-o.c.Life.Closing:
		return Say.ErrClosed
	}
}

// refusedBy moves a multi-name lock's wait to the name that refused its
// attempt.
func (a *Acquisition) refusedBy(err error) {
	if a.Kind != KindMulti || err == nil {
		return // (te below would cost every attempt an allocation)
	}
	if name, _, ok := Say.TakenBy(err); ok && name != "" {
		a.Queue = QueueKey(ReleaseChannel(LockKey(a.Cfg.Prefix, name)), QueueMulti)
	}
}

// writerWait is a waiting Lock call's entry in the queue of waiting writers
// of its name (enqueue, in _lib.lua). The entry lapses 5s after the call's
// last refused attempt; a waiting Lock tries again at least every
// MaxTrustedSleep, or at its retry policy's pace while it polls, so a live
// waiter keeps it, and one that crashed delays new readers and the writers
// behind it by at most that.
type writerWait struct {
	id      string // the first attempt's owner value
	entered bool   // an attempt failed, so the script may have entered id
	// unmarked: the next attempt is a queued call's while its own core
	// holds the name; a refusal by that holder need not mark the name
	// waited for (acquire.lua's UnmarkedPrefix), since its Unlock hands
	// the name over or wakes the call without a message. Were the refusal
	// another process's (our holder lost the name), the wait is bounded as
	// for a lost message: by that holder's lease and MaxTrustedSleep.
	unmarked bool
}

// MaxTrustedSleep caps a waiter's sleep while it relies on release messages:
// a subscription on a server that no longer gets the releases (a Sentinel
// failover moved the master, and go-redis does not move pub/sub connections)
// is found out within this time instead of a whole lease.
const MaxTrustedSleep = time.Second

// obtaining is the state of one waiting acquisition between its attempts.
type obtaining struct {
	c  *Core
	a  *Acquisition
	tr *acquireTrace
	w  *waiter
	qk string // the queue w is in

	try, warm, acquired bool
	// first: this call's first attempt is the one on the wire for its name
	// (heldNames.tryFirst), until it queues or returns.
	first               bool
	heardSeq            uint64
	silentSince, warned time.Time     // see unanswered
	lastErr             error         // the last refused attempt's; see last
	hint                time.Duration // the holder's remaining lease, negative when unknown
	woke                wokeBy
	// What the last refused attempt found (verdict): the owner holding a
	// quorum, or that the name is split between contenders; and how long
	// that attempt took, the scale of jitter.
	firm      string
	contested bool
	took      time.Duration
}

// last is the error of the last refused attempt, or, before any, the bare
// "not obtained" of the name (built only then: the uncontended Lock never
// needs it).
func (o *obtaining) last() error {
	if o.lastErr == nil {
		return Say.NotObtained(o.a.Name)
	}
	return o.lastErr
}

// attemptOnce makes one attempt; done reports that obtain returns with l
// and err (got it, or gave up for good).
func (o *obtaining) attemptOnce(ctx context.Context, attempt int) (l *Hold, err error, done bool) {
	c, a := o.c, o.a
	began := time.Now()
	// A call that has not queued yet tries only while the core does not
	// hold the name (run), unless its policy allows no wait at all.
	a.ww.unmarked = a.writer && o.w != nil && c.names.has(a.Held)
	l, v, err := c.attempt(ctx, a)
	a.refusedBy(err)
	if o.w != nil {
		c.Waits.doneAttempting(o.w)
	}
	o.tr.Attempted(err)
	if err == nil {
		o.acquired = true
		if o.woke == wokeEarly {
			// Our timer, not a message, found the name released before the
			// holder's lease ended: the subscription did not hear that
			// release (a failover moved the master, a connection that reads
			// but hears nothing). Re-home it.
			c.Waits.PS.Suspect(channelOf(o.qk))
		}
		return l, nil, true
	}
	if a.writer {
		// Refused, or unknown: the script may have entered us.
		a.ww.entered = true
	}
	if v.permanent {
		return nil, err, true
	}
	if cerr := ctx.Err(); cerr != nil {
		// The attempt that ctx cut short may have heard nothing: report
		// what the previous ones heard (a refusal, a holder).
		if attempt > 0 {
			err = o.last()
		}
		if !errors.Is(err, cerr) {
			err = Say.Join(err, cerr)
		}
		return nil, err, true
	}
	o.lastErr, o.hint = err, v.hint
	o.firm, o.contested, o.took = v.firm, v.contested, time.Since(began)
	if err := o.unanswered(ctx, v.answered, began, err); err != nil {
		return nil, err, true
	}
	if a.writer {
		if _, owner, ok := Say.TakenBy(err); ok {
			c.Waits.reservedFor(a.Channel, owner)
		}
	}
	if redis.IsReadOnlyError(err) {
		// A failover demoted the master: pub/sub may sit on it.
		c.Waits.PS.Suspect(channelOf(o.qk))
	}
	return nil, nil, false
}

// unansweredWarnGap is the least time between two WARN lines of one call
// about attempts that got no answer.
const unansweredWarnGap = 5 * time.Second

// unanswered keeps the count of attempts in a row that no quorum of nodes
// answered (the latest began at began, with error err): it logs them at
// WARN, rate limited, and once they have lasted WithUnansweredLimit from the
// start of the first returns the error that ends the wait (sleepFor makes
// the last attempt come at that limit). An answered attempt (contention)
// resets it. Before it gives up it asks the silent nodes why (diagnose),
// for as long as ctx lasts: when ctx ends meanwhile, the error matches
// ctx's error too.
func (o *obtaining) unanswered(ctx context.Context, answered bool, began time.Time, err error) error {
	if answered {
		o.silentSince = time.Time{}
		return nil
	}
	now := time.Now()
	if o.silentSince.IsZero() {
		o.silentSince = began
	}
	silent := now.Sub(o.silentSince)
	if lim := o.a.Cfg.Unanswered; lim > 0 && silent >= lim {
		causes := []error{Say.NotObtained(o.a.Name), fmt.Errorf("%w for %v", Say.ErrUnreachable, silent.Round(time.Millisecond))}
		if parts, ok := Say.Parts(err); ok {
			causes = append(causes, parts[1:]...) // after its head, which says "not obtained" again
		} else {
			causes = append(causes, err)
		}
		causes = o.c.Pool.diagnose(ctx, causes)
		if cerr := ctxEnded(ctx); cerr != nil {
			causes = append(causes, cerr) // it ended while the diagnosis ran
		}
		return Say.Join(causes...)
	}
	if o.warned.IsZero() || now.Sub(o.warned) >= unansweredWarnGap {
		o.warned = now
		o.a.Cfg.Logger.Warn("redlock: no answer from Redis; still trying", "name", o.a.Name, "for", silent.Round(time.Millisecond), "limit", o.a.Cfg.Unanswered, "err", err)
	}
	return nil
}

// endFirst ends this call's first attempt on the wire, if it was one.
func (o *obtaining) endFirst() {
	if o.first {
		o.first = false
		o.c.names.doneFirst(o.a.Held)
	}
}

// queue puts the acquisition in its local queue, unless it is there
// already (an attempt may have moved the queue it waits in). A call whose
// first attempt the others queued behind goes ahead of them: it came
// first.
func (o *obtaining) queue(ctx context.Context) {
	c, a := o.c, o.a
	if o.w != nil && o.qk != a.Queue {
		c.Waits.Leave(o.qk, o.w, false)
		o.w = nil
	}
	if o.w != nil {
		return
	}
	wid := ""
	if a.writer {
		if a.ww.id == "" {
			// Queued without an attempt: the id its attempts and the
			// messages passing it the name will carry.
			a.ww.id = uuid.NewString()
		}
		wid = a.ww.id
	}
	o.qk = a.Queue
	w, sent := c.Waits.Join(o.qk, a.Name, wid, a.Cfg, ctx.Done(), o.first)
	o.w = w
	pubsub.Subscribed(ctx, sent, c.Pool.Quorum, a.Cfg.Timeout(a.Cfg.TTL))
	if o.warm && c.Waits.missed(channelOf(o.qk), o.heardSeq, wid) {
		// A release came between the refusal and the join, with nobody
		// here to wake: look again at once.
		notify(w)
	}
}

// sleepFor plans the wait before attempt+1: the retry policy's delay,
// capped at the holder's remaining lease, or that lease (at most
// MaxTrustedSleep) while release messages can be trusted. ok is false when
// the policy gives up.
func (o *obtaining) sleepFor(attempt int) (d time.Duration, trusted, ok bool) {
	d = o.a.Cfg.Retry(attempt)
	if d < 0 {
		return 0, false, false
	}
	// A policy the caller chose bounds every wait; messages only wake the
	// waiter earlier. Only the default one gives way to trusted messages.
	trusted = !o.a.Cfg.RetrySet && (attempt > 0 || o.warm) && o.c.Waits.PS.Trusted()
	switch {
	case o.hint < 0:
	case trusted:
		// Release messages arrive: sleep until the holder's lease would run
		// out (a crashed holder publishes nothing), not in polls, but no
		// longer than MaxTrustedSleep, so a subscription that hears nothing
		// cannot cost a whole lease.
		d = min(o.hint+time.Millisecond, MaxTrustedSleep)
	case o.hint+time.Millisecond < d:
		// Polling: never sleep past the end of the holder's lease. The first
		// wait polls too: a release may have come between the failed
		// attempt and the SUBSCRIBE.
		d = o.hint + time.Millisecond
	}
	if lim := o.a.Cfg.Unanswered; lim > 0 && !o.silentSince.IsZero() {
		// Unanswered so far: the next attempt comes no later than the
		// limit, so the wait ends at it, not a retry delay past it.
		d = min(d, max(time.Until(o.silentSince.Add(lim)), 0))
	}
	return d, trusted, true
}

// leave withdraws an acquisition that did not get the lock from the name's
// server-side queue of writers, and any acquisition from its local queue.
// It returns err, the call's, joined with ctx's error when ctx ended while
// the call waited for its withdrawal.
func (o *obtaining) leave(ctx context.Context, err error) error {
	c, a := o.c, o.a
	if !o.acquired && a.writer && a.ww.entered {
		// The withdrawal runs from a goroutine of the core, and a release
		// of the name by this core waits for it (withdrawals), so that it
		// does not reserve the name for a writer that left. A caller whose
		// ctx ended gets its answer now; one that gave up for another
		// reason (its retry policy, the unanswered limit, a refusal)
		// leaves the queue before it returns, unless its ctx ends first.
		w := Withdrawal{Tag: a.Tag, ID: a.ww.id, Channel: a.Channel, Timeout: a.Cfg.Timeout(a.Cfg.TTL), sharded: a.Cfg.Sharded}
		if c.Life.GoCount(1) {
			done := c.Withdraw.begin(a.Channel)
			var left chan struct{}
			if ctxEnded(ctx) == nil {
				left = make(chan struct{})
			}
			go func() {
				defer c.Life.WG.Done()
				defer done()
				Unwait(ctx, c.Pool, w)
				if left != nil {
					close(left)
				}
			}()
			if left != nil {
				select {
				case <-left:
				case <-ctx.Done():
					if !errors.Is(err, ctx.Err()) {
						err = Say.Join(err, ctx.Err())
					}
				}
			}
		} else {
			Unwait(ctx, c.Pool, w) // Close began: it leaves before Lock returns
		}
	}
	if o.w == nil {
		return err
	}
	c.Waits.Leave(o.qk, o.w, o.acquired)
	if !o.acquired {
		// A lock handed over just before leave marked w gone: nobody else
		// will own it.
		select {
		case hl := <-o.w.Handed:
			_ = hl.Unlock(context.WithoutCancel(ctx))
		default:
		}
	}
	return err
}

// How a waiter's wait ended.
type wokeBy uint8

// await blocks w until it should try again: woken by a release while head,
// or, as head, when its timer (the retry delay, capped at the holder's
// remaining lease) runs out. Waiters behind the head only re-check their
// place when their timer fires.
func (o *obtaining) await(ctx context.Context, delay time.Duration) (wokeBy, *Hold, error) {
	c, w := o.c, o.w
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case l := <-w.Handed:
			if err := ctx.Err(); err != nil {
				// Handed over as the caller gave up: a Lock whose ctx ended
				// returns no lock. Its release hands it to the next waiter.
				_ = l.Unlock(context.WithoutCancel(ctx))
				return wokeNone, nil, err
			}
			return wokeHanded, l, nil
		case <-w.wake:
			if c.Waits.wokenAttempt(w) {
				return wokeMessage, nil, nil
			}
			// Being handed the lock: it arrives on handed, or unreserve
			// wakes w again.
		case <-t.C:
			if c.Waits.startAttempt(o.qk, w) {
				return wokeTimer, nil, nil
			}
			t.Reset(delay)
		case <-ctx.Done():
			return wokeNone, nil, ctx.Err()
		case <-c.Life.Closing:
			return wokeNone, nil, Say.ErrClosed
		}
	}
}

const (
	wokeNone    wokeBy = iota // no wait yet
	wokeMessage               // a release message, as head
	wokeTimer                 // its own timer, as head
	wokeEarly                 // its timer, before the holder's lease would end (set by lock)
	wokeHanded                // an Unlock of this core handed it the lock
)

// Named checks a call on the exclusive lock name and returns its
// acquisition: its config, lock key and release channel.
func Named[O ~func(*Config)](c *Core, name string, opts []O) (Acquisition, error) {
	if c == nil {
		return Acquisition{}, ErrNoCore
	}
	if name == "" {
		return Acquisition{}, errors.New("redlock: empty lock name")
	}
	cfg, err := CallOptions(&c.Cfg, opts)
	if err != nil {
		return Acquisition{}, err
	}
	key, channel := KeyAndChannel(cfg.Prefix, name)
	return Acquisition{Kind: KindExclusive, Name: name, Tag: key, Channel: channel, Cfg: cfg, Queue: channel, Held: key}, nil
}

// lock is Lock: a waiting writer, which keeps new read holds out (writer
// preference; a Redlock offers no read holds, so its masters need no entry).
func LockName[O ~func(*Config)](ctx context.Context, c *Core, name string, opts []O) (*Hold, error) {
	a, err := Named(c, name, opts)
	if err != nil {
		return nil, err
	}
	a.writer = len(c.Pool.Nodes) == 1
	return c.Obtain(ctx, &a, true)
}

// tryLock is TryLock: one attempt.
func TryLockName[O ~func(*Config)](ctx context.Context, c *Core, name string, opts []O) (*Hold, error) {
	a, err := Named(c, name, opts)
	if err != nil {
		return nil, err
	}
	return c.try(ctx, &a)
}

// Obtain is every acquire call of every kind: one attempt (wait=false), or
// the wait loop (obtain.go).
func (c *Core) Obtain(ctx context.Context, a *Acquisition, wait bool) (*Hold, error) {
	if !wait {
		return c.try(ctx, a)
	}
	if err := c.acquirable(ctx); err != nil {
		return nil, err
	}
	o := &obtaining{c: c, a: a, qk: a.Queue, hint: -1}
	return o.run(ctx)
}

// try makes one attempt of a, traced for the observer.
func (c *Core) try(ctx context.Context, a *Acquisition) (l *Hold, err error) {
	if err := c.acquirable(ctx); err != nil {
		return nil, err
	}
	tr := NewAcquireTrace(ctx, a.Cfg, a.Name, false)
	l, _, err = c.attempt(ctx, a)
	tr.Attempted(err)
	tr.Done(l, err)
	return l, err
}

// acquirable refuses an acquire call whose ctx has ended, or after Close.
func (c *Core) acquirable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return Say.Join(Say.ErrNotObtained, err)
	}
	if c.Life.IsClosing() {
		return Say.Join(Say.ErrNotObtained, Say.ErrClosed)
	}
	return nil
}
