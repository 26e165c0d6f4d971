package redlock

import (
	"errors"
	"fmt"
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
)

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

func (e *NodeError) Error() string {
	if e.Addr != "" {
		return fmt.Sprintf("redlock: node %d (%s): %v", e.Node, e.Addr, e.Err)
	}
	return fmt.Sprintf("redlock: node %d: %v", e.Node, e.Err)
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
