package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// TakenError reports that another owner holds the lock: the error of a
// TryLock refused for that reason, and of a Lock that gave up (its retry
// policy ran out, or its context ended) after such a refusal, carries one;
// get it with errors.As. It matches ErrNotObtained. On a Redlock it
// describes the masters that refused.
type TakenError struct {
	// Name is the lock's name.
	Name string
	// Owner is the value the holder stored under the key (on the first
	// refusing master): its Lock.Owner, if it is a lock of this library;
	// "queued:<id>" while a release has reserved the name for a queued
	// waiter of another Lock call; "" when read holds refuse a writer, or a
	// waiting writer refuses a read hold ([Locker.RLock]).
	Owner string
	// TTL is the holder's remaining lease, the shortest among the refusing
	// masters, or negative when the key has no expiry.
	TTL time.Duration
	// Nodes are the indices of the refusing masters (0 for a Locker) among
	// those that answered before the attempt was settled: a Redlock stops
	// listening once a majority refused.
	Nodes []int
}

func (e *TakenError) Error() string {
	if e.Owner == "" {
		return fmt.Sprintf("redlock: lock %q busy (read holds, or a writer waiting) for another %v", e.Name, e.TTL)
	}
	return fmt.Sprintf("redlock: lock %q held by owner %s for another %v", e.Name, e.Owner, e.TTL)
}

// Is reports whether target is ErrNotObtained.
func (e *TakenError) Is(target error) bool { return target == ErrNotObtained }

// Key returns the Redis key that holds the lock ("{<prefix><name>}"; for a
// read hold or a permit, the sorted set that holds it; for a LockAll lock,
// its first name's key), for tools and tests that inspect or break it (see
// package redlocktest).
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.keys[0]
}

// TTL asks the server for the lock's remaining lease, as bsm/redislock's
// Lock.TTL does: the key's PTTL while it still holds this lock's owner
// value. On a Redlock it is the lease that a quorum of masters still grants
// (the quorum-th longest). It returns an error matching ErrNotHeld when the
// key is gone or another owner's (on too many masters), and another error
// when too few nodes answered within the node timeout. It does not look at
// the local state: use [Lock.Err] or [Lock.Until] for that, which cost no
// round trip and are the safer bound (they subtract drift).
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil {
		return 0, errNilLock
	}
	return l.eng.remaining(ctx, l)
}

// Valid reports whether the lock is still held: locally (Err is nil) and on
// the server (a quorum of nodes still hold its owner value), as redsync's
// Valid does, but never true after Until. An error means the server could
// not be asked; false with a nil error means it is not held.
func (l *Lock) Valid(ctx context.Context) (bool, error) {
	if l.Err() != nil {
		return false, nil
	}
	d, err := l.TTL(ctx)
	switch {
	case errors.Is(err, ErrNotHeld):
		return false, nil
	case err != nil:
		return false, err
	}
	return d != 0 && l.Err() == nil, nil
}
