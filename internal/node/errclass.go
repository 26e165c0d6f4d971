package node

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
	ErrTaken     = errors.New("held by another owner")
	ErrTimeout   = errors.New("no reply within the node timeout")
	ErrBusy      = errors.New("the previous renewal on this node has not answered yet")
	ErrBadReply  = errors.New("unexpected script reply")
	ErrDuplicate = errors.New("same server as another node of this Redlock")
)

// IsTimeout reports a socket deadline that fired (a clone bounded by the
// node timeout, see ClientFor): no answer in time.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// IsServerError reports an error reply from Redis (as opposed to a network
// failure or a timeout).
func IsServerError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// IsPermanent tells a refusal that no retry can get past (wrong password,
// missing permission, wrong key type, out of memory, a script error, a closed
// client) from a failure that a retry may get past (timeouts, dropped
// connections, a loading, read-only or failing-over server). Lock gives up at
// once on a permanent one.
func IsPermanent(err error) bool {
	switch {
	case errors.Is(err, redis.ErrClosed), errors.Is(err, ErrTokenSpace), errors.Is(err, ErrDuplicate), errors.Is(err, ErrPermits):
		return true
	case errors.Is(err, ErrTimeout), errors.Is(err, ErrBusy),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return false
	}
	if !IsServerError(err) {
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

// IsProtocolError reports a reply that is not Redis's protocol: the port
// belongs to another server (an HTTP server answers HELLO with a status
// line). go-redis has no classifier for its reader's errors; these are its
// texts.
func isProtocolError(err error) bool {
	s := err.Error()
	return strings.Contains(s, "redis: can't parse") || strings.Contains(s, "redis: invalid reply")
}

// IsNoScript reports that a script is not in the server's cache, however a
// hook wrapped the error.
func IsNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// IsDialError reports a failure to connect at all (refused, unreachable).
func IsDialError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// ErrTokenSpace: a name's fencing counter is where a Lua double can no longer
// count up by one, so the next token would repeat the last.
var ErrTokenSpace = errors.New("fencing counter exhausted: tokens would stop increasing at 2^53-1")

// ErrPermits: a Semaphore's permit count differs from the one the live
// holders of its name took their permits under. Permanent: waiting does not
// change another process's configuration.
var ErrPermits = errors.New("redlock: semaphore permit counts differ between processes")
