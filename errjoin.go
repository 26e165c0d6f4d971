package redlock

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redlockgo/redlock/internal/node"
)

// The one error of a call. Every error the library returns prints on one
// line: the operation and the lock's name, then the causes, each said once.
// They are built with join, which keeps every part for errors.Is and
// errors.As. (The error types themselves are in errors.go.)

// observeNodes reports the NodeErrors in errs (joined or not) to obs.
func observeNodes(obs Observer, name, op string, errs ...error) {
	if obs == nil {
		return
	}
	for _, err := range errs {
		eachNodeError(err, func(ne *NodeError) {
			if !errors.Is(ne.Err, node.ErrTaken) {
				obs.OnNodeError(NodeErrorEvent{Name: name, Op: op, Err: ne})
			}
		})
	}
}

// eachNodeError calls f for every NodeError in err's tree.
func eachNodeError(err error, f func(*NodeError)) {
	switch e := err.(type) {
	case nil:
	case *NodeError:
		f(e)
	case interface{ Unwrap() []error }:
		for _, err := range e.Unwrap() {
			eachNodeError(err, f)
		}
	case interface{ Unwrap() error }:
		eachNodeError(e.Unwrap(), f)
	}
}

// joinedError is errors.Join printed on one line: the first part in full,
// then ": " (or "; " after a node's failure) and the others separated by "; ", each without the "redlock: "
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
	nodeHead := false // the head is a node's failure, not an operation: its peers follow with "; "
	for i, e := range j.errs {
		s := clauseOf(e)
		if ne, ok := e.(*NodeError); ok {
			if s = j.nodesSaying(i, ne); s == "" {
				continue // said with an earlier node's
			}
		}
		if te, ok := e.(*TakenError); ok && !strings.Contains(b.String(), strconv.Quote(te.Name)) {
			s = te.Error() // one name of a LockAll: say which
		}
		switch e.(type) {
		case quietError:
		case *NodeError:
			if len(said) == 0 {
				s, nodeHead = "redlock: "+s, true // the head: its prefix, and the nodes grouped
			}
		default:
			if len(said) == 0 {
				s = e.Error() // the head, in full
			} else {
				s = strings.TrimPrefix(s, "redlock: ")
			}
		}
		if s == "" || saidAlready(said, s) {
			continue
		}
		switch len(said) {
		case 0:
		case 1:
			if nodeHead {
				b.WriteString("; ")
			} else {
				b.WriteString(": ")
			}
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
	return nodesClause(names, cause)
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
// TakenError need not repeat the lock's name, a NodeError or LostError the
// prefixes of what it wraps.
type clauser interface{ clause() string }

func clauseOf(e error) string {
	if c, ok := e.(clauser); ok {
		return c.clause()
	}
	return e.Error()
}

// quietError is a part of a joined error that errors.Is and errors.As see
// but that is not printed: it restates what another part says (each node's
// "held by another owner" next to the TakenError that names the holder).
type quietError struct{ err error }

func (q quietError) Error() string { return q.err.Error() }

func (q quietError) clause() string { return "" }

func (q quietError) Unwrap() error { return q.err }

// opError is the head of a joined error: the operation and the lock's name
// ("redlock: lock \"jobs\" not obtained"), matching its sentinel.
type opError struct {
	msg      string
	sentinel error
}

func (e *opError) Error() string { return e.msg }

func (e *opError) Unwrap() error { return e.sentinel }

// NotHeld is the error of op (unlock, extend, TTL) on the lock name that
// found it no longer ours, with its cause.
func notHeld(op, name string, cause error) error {
	return join(&opError{msg: fmt.Sprintf("redlock: %s %q: lock not held", op, name), sentinel: ErrNotHeld}, cause)
}

// NotObtained is the head of a failed acquisition of name.
func notObtained(name string) error {
	return &opError{msg: fmt.Sprintf("redlock: lock %q not obtained", name), sentinel: ErrNotObtained}
}
