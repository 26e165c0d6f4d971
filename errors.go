package redlock

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/engine"
)

// Sentinel errors. Match them with [errors.Is]; the library wraps and joins them
// with per-node causes and with the caller's context error.
var (
	// ErrNotObtained reports that a lock could not be acquired: another owner
	// holds it, no quorum of nodes granted it, or its validity ran out before
	// the grant completed. When Lock gives up because its context ended, the
	// returned error matches both ErrNotObtained and ctx.Err().
	ErrNotObtained = errors.New("redlock: lock not obtained")

	// ErrNotHeld reports that an Unlock or Extend found the lock no longer
	// ours: the key expired, was deleted, or belongs to another owner. The
	// other owner's key is left untouched.
	ErrNotHeld = errors.New("redlock: lock not held")

	// ErrLost is what [Lock.Err] returns once a held lock was lost: renewal did
	// not succeed before [Lock.Until], Redis reported the key gone or owned
	// by someone else, Close released it, or its [WithMaxHold] cap ran out.
	// The error is a [*LostError], whose [LossReason] says which (match it
	// with errors.Is or errors.As). Do returns an error matching ErrLost when
	// the lock was lost while its function ran.
	ErrLost = errors.New("redlock: lock lost")

	// ErrReleased is what [Lock.Err] returns after [Lock.Unlock] (or Close of
	// the Locker or Redlock that issued the lock).
	ErrReleased = errors.New("redlock: lock released")

	// ErrStaleToken reports that a fencing guard rejected a token lower than
	// the highest it has admitted: the caller's lock was superseded.
	ErrStaleToken = errors.New("redlock: stale fencing token")

	// ErrClosed reports a call on a Locker or Redlock after Close.
	ErrClosed = errors.New("redlock: closed")

	// ErrUnreachable reports that a waiting Lock gave up because no quorum
	// of nodes answered its attempts for [WithUnansweredLimit] in a row
	// (connections refused, timeouts), as opposed to contention. The error
	// also matches ErrNotObtained, and names the last cause.
	ErrUnreachable = errors.New("redlock: no answer from Redis")

	// ErrNoLeader is what [Election.Leader] returns when nobody leads the
	// election: the name is free, or a release has just reserved it for a
	// waiting candidate that has not taken it yet.
	ErrNoLeader = errors.New("redlock: no leader")
)

// NodeError is the failure of one Redis node in a call that fans out to
// several. Errors of a Redlock call join one NodeError per failing node. A
// node that refused a write with READONLY prints as "node N (ADDR) is a
// replica (READONLY)"; the server's own text is Err, at the end of the chain.
type NodeError struct {
	// Node is the index of the node in the client list given to the
	// constructor (always 0 for a Locker).
	Node int
	// Addr describes the node, as the client's String method does, or is
	// empty when the client has no such method.
	Addr string
	// Err is the node's error.
	Err error
}

// clause is the node and its error without the "redlock: " prefixes.
func (e *NodeError) clause() string { return nodesClause([]string{e.label()}, e.cause()) }

// replicaCause is the cause of a node that refused a write with READONLY:
// the server's text names the script's SHA and line, which mean nothing to
// the reader. That text stays in the chain (Err), where
// redis.IsReadOnlyError finds it.
const replicaCause = "is a replica (READONLY)"

// nodesClause says what the nodes labelled labels did: "node 0 (a), node 1
// (b): cause", or "node 0 (a) is a replica (READONLY)".
func nodesClause(labels []string, cause string) string {
	if cause == replicaCause {
		if len(labels) > 1 {
			return strings.Join(labels, ", ") + " are replicas (READONLY)"
		}
		return labels[0] + " " + cause
	}
	return strings.Join(labels, ", ") + ": " + cause
}

func (e *NodeError) Error() string { return "redlock: " + e.clause() }

// label names the node: its index and address.
func (e *NodeError) label() string {
	if e.Addr != "" {
		return fmt.Sprintf("node %d (%s)", e.Node, e.Addr)
	}
	return fmt.Sprintf("node %d", e.Node)
}

// cause is the node's error without its prefix, and without the address a
// network error repeats ("dial tcp 127.0.0.1:6379: connect: ..." says
// "dial: connect: ..."): the label names the node, and nodes that failed
// alike then read alike.
func (e *NodeError) cause() string {
	if e.Err == nil {
		return "unknown error"
	}
	if redis.IsReadOnlyError(e.Err) {
		return replicaCause
	}
	s := strings.TrimPrefix(clauseOf(e.Err), "redlock: ")
	var op *net.OpError
	if errors.As(e.Err, &op) && op.Addr != nil {
		s = strings.Replace(s, op.Op+" "+op.Net+" "+op.Addr.String()+": ", op.Op+": ", 1)
	}
	return s
}

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

// ReplicaAcksError says that fewer replicas acknowledged a lock's write than
// [WithReplicaAcks] asked for within its timeout. An acquisition that ends
// with it is released and its error also matches [ErrNotObtained]; a
// renewal or Extend that ends with it is a failed attempt.
type ReplicaAcksError struct {
	Acked   int           // replicas that acknowledged, as WAIT counted them
	Wanted  int           // replicas asked for
	Timeout time.Duration // how long WAIT waited
}

func (e *ReplicaAcksError) Error() string {
	return fmt.Sprintf("redlock: %d of %d replicas acknowledged within %v", e.Acked, e.Wanted, e.Timeout)
}

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
	return fmt.Sprintf("redlock: lock %q %s", e.Name, e.clause())
}

// clause is what the holder does, without the name: the head of the error
// it is joined into says that.
func (e *TakenError) clause() string {
	if e.Owner == "" {
		return fmt.Sprintf("busy (read holds, or a writer waiting) for another %v", e.TTL)
	}
	return fmt.Sprintf("held by owner %s for another %v", e.Owner, e.TTL)
}

// Is reports whether target is ErrNotObtained.
func (e *TakenError) Is(target error) bool { return target == ErrNotObtained }

// ErrAlreadyReleased is Unlock's answer on a lock released before.
var errAlreadyReleased = fmt.Errorf("%w: already released", ErrNotHeld)

// ErrNilLock is what the methods of a nil *Lock report.
var errNilLock = fmt.Errorf("%w: nil *Lock", ErrNotHeld)

// The engine builds and reads these errors through engine.Say
// (internal/engine/public.go).
func init() {
	engine.Say = engine.Vocabulary{
		ErrClosed: ErrClosed, ErrNotObtained: ErrNotObtained, ErrNotHeld: ErrNotHeld,
		ErrLost: ErrLost, ErrReleased: ErrReleased, ErrUnreachable: ErrUnreachable,
		ErrAlreadyReleased: errAlreadyReleased, ErrNilLock: errNilLock,
		Join:  join,
		Quiet: func(err error) error { return quietError{err} },
		Parts: func(err error) ([]error, bool) {
			if j, ok := err.(*joinedError); ok {
				return j.errs, true
			}
			return nil, false
		},
		NotHeld:     notHeld,
		NotObtained: notObtained,
		NodeError:   func(node int, addr string, err error) error { return &NodeError{Node: node, Addr: addr, Err: err} },
		NodeOf: func(err error) (int, error, bool) {
			if ne, ok := err.(*NodeError); ok {
				return ne.Node, ne.Err, true
			}
			return 0, nil, false
		},
		Reason: func(r engine.LossReason) error { return LossReason(r) },
		NewAlloc: func() (*engine.LockAlloc, any) {
			l := new(Lock)
			return &l.a, l
		},
		Taken: func(name, owner string, ttl time.Duration, nodes []int) error {
			return &TakenError{Name: name, Owner: owner, TTL: ttl, Nodes: nodes}
		},
		TakenBy: func(err error) (name, owner string, ok bool) {
			var te *TakenError
			if !errors.As(err, &te) {
				return "", "", false
			}
			return te.Name, te.Owner, true
		},
		ReplicaAcks: func(acked, wanted int, timeout time.Duration) error {
			return &ReplicaAcksError{Acked: acked, Wanted: wanted, Timeout: timeout}
		},
		LostError: func(name string, reason engine.LossReason, cause error) error {
			return &LostError{Name: name, Reason: LossReason(reason), Err: cause}
		},
		IsLost: func(err error) bool { _, ok := err.(*LostError); return ok },
	}
}

// The engine's names for the loss reasons and outcomes have the same
// values as the public ones: each index below is 0 only when the two are
// equal, and any other constant index is out of range, which fails the
// build.
var (
	_ = [1]int{}[int(LossExpired)-int(engine.LossExpired)]
	_ = [1]int{}[int(LossTaken)-int(engine.LossTaken)]
	_ = [1]int{}[int(LossDeleted)-int(engine.LossDeleted)]
	_ = [1]int{}[int(LossQuorum)-int(engine.LossQuorum)]
	_ = [1]int{}[int(LossClosed)-int(engine.LossClosed)]
	_ = [1]int{}[int(LossMaxHold)-int(engine.LossMaxHold)]
	_ = [1]int{}[int(Acquired)-int(engine.OutcomeAcquired)]
	_ = [1]int{}[int(Contended)-int(engine.OutcomeContended)]
	_ = [1]int{}[int(Canceled)-int(engine.OutcomeCanceled)]
	_ = [1]int{}[int(Failed)-int(engine.OutcomeFailed)]
)
