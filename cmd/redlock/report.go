package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
)

// What redlock prints when an operation fails: one line, "redlock: OP NAME:
// CAUSE", where CAUSE is read from the error the library returned, never
// assumed: another owner's hold (exit 75) only when the error carries a
// TakenError, and otherwise which servers refused or did not answer, and
// why, as go-redis's classifiers tell it (exit 69). The library's own
// wrapping ("redlock: lock not obtained", "node 0 (Redis<...>)") is left
// out: it would say again what the line already says.

// explain returns the exit code err calls for and its cause in words, or 0
// and the error's own text, cleaned, when it holds nothing to classify
// (only the end of the caller's context, say).
func (t *target) explain(err error) (int, string) {
	var te *redlock.TakenError
	if errors.As(err, &te) {
		return exitNotObtained, heldBy(te)
	}
	if nodes := nodeErrors(err); len(nodes) > 0 {
		return exitUnavailable, t.perNode(nodes)
	}
	if why, ok := t.cause(err, false); ok {
		if len(t.addrs) == 1 {
			// One server: whatever refused or failed to answer was it.
			why = t.addrs[0] + " " + why
		}
		return exitUnavailable, why
	}
	return 0, plain(err)
}

// heldBy describes another owner's hold.
func heldBy(te *redlock.TakenError) string {
	lease := "no expiry"
	if te.TTL >= 0 {
		lease = te.TTL.Round(time.Millisecond).String() + " left"
	}
	switch {
	case te.Owner == "":
		return fmt.Sprintf("busy: read holds, or a writer waiting (%s)", lease)
	case strings.HasPrefix(te.Owner, "queued:"):
		return fmt.Sprintf("reserved for a queued waiter (%s)", lease)
	}
	return fmt.Sprintf("held by another owner (owner %s, %s)", te.Owner, lease)
}

// perNode says what each failing server did, servers with the same cause
// together: "127.0.0.1:7000 refused authentication: WRONGPASS ...".
func (t *target) perNode(nodes []*redlock.NodeError) string {
	var causes []string
	addrs := map[string][]string{}
	for _, ne := range nodes {
		why, _ := t.cause(ne.Err, true)
		if _, seen := addrs[why]; !seen {
			causes = append(causes, why)
		}
		addrs[why] = append(addrs[why], t.addr(ne))
	}
	parts := make([]string, len(causes))
	for i, why := range causes {
		sep := " "
		if strings.HasPrefix(why, ":") {
			sep = ""
		}
		parts[i] = strings.Join(addrs[why], ", ") + sep + why
	}
	return strings.Join(parts, "; ")
}

// addr names the server of ne as the user gave it.
func (t *target) addr(ne *redlock.NodeError) string {
	if ne.Node >= 0 && ne.Node < len(t.addrs) {
		return t.addrs[ne.Node]
	}
	return ne.Addr
}

// cause classifies one server's error, as a predicate following the
// server's address. fromNode says that err is all one server said: there,
// a deadline is that server's silence, while on a whole call's error it
// may be the caller's own context ending. ok is false when err is none of
// the kinds below.
func (t *target) cause(err error, fromNode bool) (why string, ok bool) {
	var re redis.Error
	var oe *net.OpError
	var ne net.Error
	switch {
	case redis.IsAuthError(err):
		return "refused authentication: " + redisText(err), true
	case redis.IsPermissionError(err):
		return "refused permission: " + redisText(err), true
	case redis.IsReadOnlyError(err):
		return fmt.Sprintf("refused the write: %s (%s must name a master)", redisText(err), t.flag()), true
	case errors.As(err, &re):
		return "refused: " + redisText(err), true
	case errors.As(err, &oe) && oe.Timeout(), fromNode && errors.As(err, &ne) && ne.Timeout():
		return "did not answer in time", true
	case oe != nil && oe.Op == "dial":
		return "cannot be reached: " + innermost(oe), true
	case oe != nil:
		return "dropped the connection: " + innermost(oe), true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "closed the connection", true
	case fromNode && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		return "did not answer in time", true
	}
	if fromNode {
		return ": " + plain(err), false // "ADDR: what the library said"
	}
	return "", false
}

// flag is the flag that names the servers.
func (t *target) flag() string {
	if len(t.addrs) > 1 {
		return "--redlock"
	}
	return "--addr"
}

// redisText is the text of the Redis error in err, without what a script
// adds around it ("script: SHA, on @user_script:54.").
func redisText(err error) string {
	var re redis.Error
	if !errors.As(err, &re) {
		return plain(err)
	}
	s := re.Error()
	if strings.HasPrefix(s, "ERR Error running script") {
		if _, inner, ok := strings.Cut(s, ": -"); ok {
			s = inner
		}
	}
	if i := strings.Index(s, " script: "); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSuffix(strings.TrimSpace(s), ".")
}

// innermost is the last error of err's chain: "connection refused" rather
// than "dial tcp 127.0.0.1:1: connect: connection refused", whose address
// the line names already.
func innermost(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}

// nodeErrors returns the NodeErrors in err's tree, in order.
func nodeErrors(err error) []*redlock.NodeError {
	var out []*redlock.NodeError
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case *redlock.NodeError:
			out = append(out, e)
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
		case interface{ Unwrap() error }:
			if inner := e.Unwrap(); inner != nil {
				walk(inner)
			}
		}
	}
	if err != nil {
		walk(err)
	}
	return out
}

// plain is err on one line without the library's "redlock: " prefixes.
func plain(err error) string {
	return strings.ReplaceAll(oneLine(err), "redlock: ", "")
}

// lossText says why a held lock was lost (a LostError) or found no longer
// held (ErrNotHeld), with what the servers said when the reason does not
// say it already.
func (t *target) lossText(err error) string {
	switch {
	case errors.Is(err, redlock.LossTaken):
		return "taken by another owner"
	case errors.Is(err, redlock.LossDeleted):
		return "its key was deleted or expired on the server"
	case errors.Is(err, redlock.LossExpired):
		return t.withNodes("no renewal succeeded before its lease ran out", err)
	case errors.Is(err, redlock.LossQuorum):
		return t.withNodes("too few masters still held it", err)
	}
	// ErrNotHeld: the line says "no longer held" already, and names the
	// lock; what follows the library's head says why.
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		if parts := j.Unwrap(); len(parts) > 1 && errors.Is(parts[0], redlock.ErrNotHeld) {
			err = errors.Join(parts[1:]...)
		}
	}
	if nodes := nodeErrors(err); len(nodes) > 0 {
		return t.perNode(nodes)
	}
	why := plain(err)
	if rest, ok := strings.CutPrefix(why, plain(redlock.ErrNotHeld)+": "); ok {
		why = rest
	}
	return why
}

// withNodes is why, followed by what each failing server said, if any.
func (t *target) withNodes(why string, err error) string {
	if nodes := nodeErrors(err); len(nodes) > 0 {
		why += ": " + t.perNode(nodes)
	}
	return why
}
