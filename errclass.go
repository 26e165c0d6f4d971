package redlock

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Reasons a node did not grant or answer; they travel inside a NodeError.
var (
	errTaken       = errors.New("held by another owner")
	errNodeTimeout = errors.New("no reply within the node timeout")
	errNodeBusy    = errors.New("the previous renewal on this node has not answered yet")
	errBadReply    = errors.New("unexpected script reply")
	errDuplicate   = errors.New("same server as another node of this Redlock")
)

// isTimeout reports a socket deadline that fired (a clone bounded by the
// node timeout, see clientFor): no answer in time.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isServerError reports an error reply from Redis (as opposed to a network
// failure or a timeout).
func isServerError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// isPermanent tells a refusal that no retry can get past (wrong password,
// missing permission, wrong key type, out of memory, a script error, a closed
// client) from a failure that a retry may get past (timeouts, dropped
// connections, a loading, read-only or failing-over server). Lock gives up at
// once on a permanent one.
func isPermanent(err error) bool {
	switch {
	case errors.Is(err, redis.ErrClosed), errors.Is(err, errTokenSpace), errors.Is(err, errDuplicate), errors.Is(err, errPermits):
		return true
	case errors.Is(err, errNodeTimeout), errors.Is(err, errNodeBusy),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return false
	}
	if !isServerError(err) {
		return isProtocolError(err)
	}
	if _, moved := redis.IsMovedError(err); moved {
		return false
	}
	if _, ask := redis.IsAskError(err); ask {
		return false
	}
	transient := redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsClusterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsMasterDownError(err) || redis.IsMaxClientsError(err) ||
		redis.IsNoReplicasError(err) || redis.HasErrorPrefix(err, "BUSY")
	return !transient
}

// isProtocolError reports a reply that is not Redis's protocol: the port
// belongs to another server (an HTTP server answers HELLO with a status
// line). go-redis has no classifier for its reader's errors; these are its
// texts.
func isProtocolError(err error) bool {
	s := err.Error()
	return strings.Contains(s, "redis: can't parse") || strings.Contains(s, "redis: invalid reply")
}

// isNoScript reports that a script is not in the server's cache, however a
// hook wrapped the error.
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// isDialError reports a failure to connect at all (refused, unreachable).
func isDialError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}
