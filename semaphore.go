package redlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/scripts"
)

// Semaphore is a counting semaphore on one name: at most Permits holders at
// once, across every process that uses the name and key prefix. Each permit is a *Lock: a lease with its own
// owner value and TTL, renewed by the watchdog, reported lost through Done
// and Err like any lock, returned by Unlock. The holders are an entry each
// in the sorted set "{<prefix><name>}:sem", scored by the end of their
// lease in server time, so a crashed holder's permit comes back when its
// lease ends: no count that a crash can leak. The number of permits is
// kept beside the set while any permit is held, and an acquisition with
// another number is refused at once (an error matching ErrNotObtained):
// two processes that disagree on it never each enforce their own bound.
//
// A Semaphore is independent of the lock and read holds of the same name.
// It is safe for concurrent use; make one per name and share it.
type Semaphore struct {
	c       *engine.Core
	name    string
	permits int
}

// maxPermits bounds a semaphore's size: past it the set of holders is no
// longer a sane thing to scan on each acquisition.
const maxPermits = 1 << 20

// Semaphore returns the semaphore name with permits permits. It makes no
// call to Redis. It returns an error for an empty name, permits below 1 or
// above 2^20, or a nil Locker. Processes that share a name must agree on
// permits: while permits are held under one number, Acquire and TryAcquire
// with another return an error at once.
func (lk *Locker) Semaphore(name string, permits int) (*Semaphore, error) {
	c := lk.core()
	switch {
	case c == nil:
		return nil, engine.ErrNoCore
	case name == "":
		return nil, errors.New("redlock: empty semaphore name")
	case permits < 1 || permits > maxPermits:
		return nil, fmt.Errorf("redlock: semaphore permits %d out of range [1, %d]", permits, maxPermits)
	}
	return &Semaphore{c: c, name: name, permits: permits}, nil
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Permits returns how many holders the semaphore admits at once.
func (s *Semaphore) Permits() int { return s.permits }

// Acquire takes a permit, waiting while all are held until one is released
// (woken by the release message, or by the end of the first lease) or ctx
// ends. Options apply as for Lock; the permit's Token is a fencing token
// strictly increasing across the semaphore's permits, and WithMetadata is
// ignored. Errors are those of Lock.
func (s *Semaphore) Acquire(ctx context.Context, opts ...Option) (*Lock, error) {
	return handle(s.acquire(ctx, opts, true))
}

// TryAcquire makes one attempt to take a permit. When all are held, the
// error matches ErrNotObtained (a [*TakenError] naming the holder whose
// lease ends first).
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...Option) (*Lock, error) {
	return handle(s.acquire(ctx, opts, false))
}

// Do is [Locker.Do] for one permit: it takes a permit as Acquire does, runs
// fn while holding it (renewed unless WithAutoRenew(false)), cancels fn's
// context the moment the permit is lost, and always returns it. Its error
// is fn's, joined with one matching ErrLost if the permit was lost while fn
// ran.
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context) error, opts ...Option) error {
	var c *engine.Core
	if s != nil {
		c = s.c
	}
	return do(ctx, c, fn, func() (*engine.Hold, error) { return s.acquire(ctx, opts, true) })
}

func (s *Semaphore) acquire(ctx context.Context, opts []Option, wait bool) (*engine.Hold, error) {
	if s == nil || s.c == nil {
		return nil, engine.ErrNoCore
	}
	c := s.c
	cfg, err := engine.CallOptions(&c.Cfg, opts)
	if err != nil {
		return nil, err
	}
	set := engine.LockKey(cfg.Prefix, s.name) + scripts.SemSuffix
	channel := engine.ReleaseChannel(set)
	a := engine.Acquisition{Kind: engine.KindPermit, Name: s.name, Tag: set, Channel: channel, Cfg: cfg, Permits: s.permits, Queue: engine.QueueKey(channel, engine.QueuePermits)}
	return c.Obtain(ctx, &a, wait)
}
