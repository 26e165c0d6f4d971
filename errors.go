package redlock

import (
	"errors"
	"fmt"
	"strings"
	"time"
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
)

// Every error the library returns prints on one line: the operation and
// the lock's name, then the causes, each said once. They are built with
// join, which keeps every part for errors.Is and errors.As.

// joinedError is errors.Join printed on one line: the first part in full,
// then ": " and the others separated by "; ", each without the "redlock: "
// prefix, leaving out quiet parts and any part whose text an earlier one
// already says.
type joinedError struct{ errs []error }

// join joins the non-nil errs as errors.Join does; nil when there are none.
func join(errs ...error) error {
	n := 0
	for _, e := range errs {
		if e != nil {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	j := &joinedError{errs: make([]error, 0, n)}
	for _, e := range errs {
		if inner, ok := e.(*joinedError); ok {
			j.errs = append(j.errs, inner.errs...) // flat: one list of clauses
		} else if e != nil {
			j.errs = append(j.errs, e)
		}
	}
	return j
}

func (j *joinedError) Error() string {
	var b strings.Builder
	said := make([]string, 0, len(j.errs))
	for i, e := range j.errs {
		s := clauseOf(e)
		if ne, ok := e.(*NodeError); ok {
			if s = j.nodesSaying(i, ne); s == "" {
				continue // said with an earlier node's
			}
		}
		if _, quiet := e.(quietError); len(said) == 0 && !quiet {
			s = e.Error() // the head, in full
		} else {
			s = strings.TrimPrefix(s, "redlock: ")
		}
		if s == "" || saidAlready(said, s) {
			continue
		}
		switch len(said) {
		case 0:
		case 1:
			b.WriteString(": ")
		default:
			b.WriteString("; ")
		}
		b.WriteString(s)
		said = append(said, s)
	}
	return b.String()
}

// Unwrap returns the parts, for errors.Is and errors.As.
func (j *joinedError) Unwrap() []error { return j.errs }

// nodesSaying is the clause of the NodeError at i together with every later
// node that failed the same way ("node 1 (a), node 2 (b): refused"), or ""
// when an earlier node's clause said it already.
func (j *joinedError) nodesSaying(i int, ne *NodeError) string {
	cause := ne.cause()
	for _, e := range j.errs[:i] {
		if o, ok := e.(*NodeError); ok && o.cause() == cause {
			return ""
		}
	}
	names := []string{ne.label()}
	for _, e := range j.errs[i+1:] {
		if o, ok := e.(*NodeError); ok && o.cause() == cause {
			names = append(names, o.label())
		}
	}
	return strings.Join(names, ", ") + ": " + cause
}

func saidAlready(said []string, s string) bool {
	for _, x := range said {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

// clauser is a part that says less inside a joined error than alone: a
// TakenError need not repeat the lock's name, a joined error its parts'
// prefixes.
type clauser interface{ clause() string }

func clauseOf(e error) string {
	if c, ok := e.(clauser); ok {
		return c.clause()
	}
	return e.Error()
}

func (j *joinedError) clause() string { return strings.TrimPrefix(j.Error(), "redlock: ") }

// quietError is a part of a joined error that errors.Is and errors.As see
// but that is not printed: it restates what another part says (each node's
// "held by another owner" next to the TakenError that names the holder).
type quietError struct{ err error }

func (q quietError) Error() string  { return q.err.Error() }
func (q quietError) clause() string { return "" }
func (q quietError) Unwrap() error  { return q.err }

// opError is the head of a joined error: the operation and the lock's name
// ("redlock: lock \"jobs\" not obtained"), matching its sentinel.
type opError struct {
	msg      string
	sentinel error
}

func (e *opError) Error() string { return e.msg }
func (e *opError) Unwrap() error { return e.sentinel }

// notHeld is the error of op (unlock, extend, TTL) on the lock name that
// found it no longer ours, with its cause.
func notHeld(op, name string, cause error) error {
	return join(&opError{msg: fmt.Sprintf("redlock: %s %q: lock not held", op, name), sentinel: ErrNotHeld}, cause)
}

// notObtained is the head of a failed acquisition of name.
func notObtained(name string) error {
	return &opError{msg: fmt.Sprintf("redlock: lock %q not obtained", name), sentinel: ErrNotObtained}
}

// NodeError is the failure of one Redis node in a call that fans out to
// several. Errors of a Redlock call join one NodeError per failing node.
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
func (e *NodeError) clause() string { return e.label() + ": " + e.cause() }

func (e *NodeError) Error() string { return "redlock: " + e.clause() }

// label names the node: its index and address.
func (e *NodeError) label() string {
	if e.Addr != "" {
		return fmt.Sprintf("node %d (%s)", e.Node, e.Addr)
	}
	return fmt.Sprintf("node %d", e.Node)
}

// cause is the node's error without its prefix.
func (e *NodeError) cause() string {
	if e.Err == nil {
		return "unknown error"
	}
	return strings.TrimPrefix(clauseOf(e.Err), "redlock: ")
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
