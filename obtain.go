package redlock

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// obtain drives an acquisition: one attempt (wait=false), or attempts until
// one succeeds, ctx ends or the retry policy gives up, waiting in between
// for a release message or a timer: attempt, plan the sleep, wait.
func (c *core) obtain(ctx context.Context, a *acquisition, wait bool) (l *Lock, err error) {
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(ErrNotObtained, err)
	}
	if c.isClosing() {
		return nil, errors.Join(ErrNotObtained, ErrClosed)
	}
	tr := newAcquireTrace(ctx, a.cfg, a.name, wait)
	defer func() { tr.done(l, err) }()
	if !wait {
		l, _, _, err := c.attempt(ctx, a)
		tr.attempted(err)
		return l, err
	}
	// FIFO within this core: no attempt while others of ours wait or hold the
	// name; queue behind them instead (see wait.go). An uncontended Lock
	// never touches pub/sub: it subscribes only after a failed attempt.
	o := &obtaining{c: c, a: a, tr: tr, qk: a.queue, lastErr: ErrNotObtained, hint: -1}
	o.try = !c.waits.busy(a.queue) && (a.held == "" || !c.holds(a.held))
	// A channel already confirmed subscribed before the first attempt (a
	// name this process waits for often) hears any release after it: the
	// first wait can trust messages instead of polling.
	o.warm, o.heardSeq = c.waits.listening(channelOf(a.queue))
	defer o.leave(ctx)
	for attempt := 0; ; attempt++ {
		if o.try {
			if l, err, done := o.attemptOnce(ctx, attempt); done {
				return l, err
			}
		}
		o.try = true
		o.queue(ctx)
		d, trusted, ok := o.sleepFor(attempt)
		if !ok {
			return nil, o.lastErr // the retry policy gave up (LimitRetry, NoRetry)
		}
		woke, handed, err := c.await(ctx, o.qk, o.w, d)
		switch {
		case err != nil:
			return nil, errors.Join(o.lastErr, err)
		case handed != nil:
			o.acquired = true
			return handed, nil
		}
		o.woke = woke
		if woke == wokeTimer && trusted && d < o.hint {
			o.woke = wokeEarly
		}
	}
}

// obtaining is the state of one waiting acquisition between its attempts.
type obtaining struct {
	c  *core
	a  *acquisition
	tr *acquireTrace
	w  *waiter
	qk string // the queue w is in

	try, warm, acquired bool
	heardSeq            uint64
	lastErr             error
	hint                time.Duration // the holder's remaining lease, negative when unknown
	woke                wokeBy
}

// attemptOnce makes one attempt; done reports that obtain returns with l
// and err (got it, or gave up for good).
func (o *obtaining) attemptOnce(ctx context.Context, attempt int) (l *Lock, err error, done bool) {
	c, a := o.c, o.a
	l, h, permanent, err := c.attempt(ctx, a)
	if o.w != nil {
		c.waits.doneAttempting(o.w)
	}
	o.tr.attempted(err)
	if err == nil {
		o.acquired = true
		if o.woke == wokeEarly {
			// Our timer, not a message, found the name released before the
			// holder's lease ended: the subscription did not hear that
			// release (a failover moved the master, a connection that reads
			// but hears nothing). Re-home it.
			c.waits.suspect(channelOf(o.qk))
		}
		return l, nil, true
	}
	if a.writer {
		// Refused, or unknown: the script may have entered us.
		a.ww.entered = true
	}
	if permanent {
		return nil, err, true
	}
	if cerr := ctx.Err(); cerr != nil {
		// The attempt that ctx cut short may have heard nothing: report
		// what the previous ones heard (a refusal, a holder).
		if attempt > 0 {
			err = o.lastErr
		}
		if !errors.Is(err, cerr) {
			err = errors.Join(err, cerr)
		}
		return nil, err, true
	}
	o.lastErr, o.hint = err, h
	if a.writer {
		var te *TakenError
		if errors.As(err, &te) {
			c.waits.reservedFor(a.channel, te.Owner)
		}
	}
	if redis.IsReadOnlyError(err) {
		// A failover demoted the master: pub/sub may sit on it.
		c.waits.suspect(channelOf(o.qk))
	}
	return nil, nil, false
}

// queue puts the acquisition in its local queue, unless it is there
// already (an attempt may have moved the queue it waits in).
func (o *obtaining) queue(ctx context.Context) {
	c, a := o.c, o.a
	if o.w != nil && o.qk != a.queue {
		c.waits.leave(o.qk, o.w, false)
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
	o.qk = a.queue
	w, sent := c.waits.join(o.qk, a.name, wid, a.cfg, ctx.Done())
	o.w = w
	subscribed(ctx, sent, c.quorum, a.cfg.timeout(a.cfg.ttl))
	if o.warm && c.waits.missed(channelOf(o.qk), o.heardSeq, wid) {
		// A release came between the refusal and the join, with nobody
		// here to wake: look again at once.
		notify(w)
	}
}

// sleepFor plans the wait before attempt+1: the retry policy's delay,
// capped at the holder's remaining lease, or that lease (at most
// maxTrustedSleep) while release messages can be trusted. ok is false when
// the policy gives up.
func (o *obtaining) sleepFor(attempt int) (d time.Duration, trusted, ok bool) {
	d = o.a.cfg.retry(attempt)
	if d < 0 {
		return 0, false, false
	}
	trusted = (attempt > 0 || o.warm) && o.c.waits.trusted()
	switch {
	case o.hint < 0:
	case trusted:
		// Release messages arrive: sleep until the holder's lease would run
		// out (a crashed holder publishes nothing), not in polls, but no
		// longer than maxTrustedSleep, so a subscription that hears nothing
		// cannot cost a whole lease.
		d = min(o.hint+time.Millisecond, maxTrustedSleep)
	case o.hint+time.Millisecond < d:
		// Polling: never sleep past the end of the holder's lease. The first
		// wait polls too: a release may have come between the failed
		// attempt and the SUBSCRIBE.
		d = o.hint + time.Millisecond
	}
	return d, trusted, true
}

// leave withdraws an acquisition that did not get the lock from the name's
// server-side queue of writers, and any acquisition from its local queue.
func (o *obtaining) leave(ctx context.Context) {
	c, a := o.c, o.a
	if !o.acquired && a.writer && a.ww.entered {
		c.unwait(ctx, a)
	}
	if o.w == nil {
		return
	}
	c.waits.leave(o.qk, o.w, o.acquired)
	if !o.acquired {
		// A lock handed over just before leave marked w gone: nobody else
		// will own it.
		select {
		case hl := <-o.w.handed:
			_ = hl.Unlock(context.WithoutCancel(ctx))
		default:
		}
	}
}
