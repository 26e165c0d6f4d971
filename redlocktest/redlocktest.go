// Package redlocktest helps users of redlock test their own code: a Locker
// on an embedded miniredis in one call, and helpers that expire or steal a
// held lock or make the server fail, so that loss handling ([redlock.Lock.Done],
// [redlock.Lock.Err], the context of [redlock.Locker.Do]) can be tested
// without a real Redis or sleeping for a lease.
//
// miniredis runs scripts and expiry like Redis, but it is not Redis: test
// what depends on Redis itself (failover, replication, timing under load)
// against a real server.
package redlocktest

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
)

// Server is an embedded miniredis and a go-redis client to it. Its methods
// may be called from any goroutine.
type Server struct {
	// Mini is the embedded server, for anything the helpers do not cover
	// (FastForward, inspecting keys).
	Mini *miniredis.Miniredis
	// Client is connected to Mini.
	Client *redis.Client
}

// NewServer starts a miniredis and a client to it, both closed when the
// test ends.
func NewServer(tb testing.TB) *Server {
	tb.Helper()
	mr := miniredis.RunT(tb)
	cl := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	tb.Cleanup(func() { cl.Close() })
	return &Server{Mini: mr, Client: cl}
}

// Defaults of NewLocker, before the caller's options: a 1s lease renewed
// every 50ms, so that a lock expired or stolen by the helpers is reported
// lost within about 50ms, and one on a failing server within a second.
var Defaults = []redlock.Option{
	redlock.WithTTL(time.Second),
	redlock.WithRenewInterval(50 * time.Millisecond),
}

// NewLocker returns a Locker on a fresh embedded server, with [Defaults]
// and then opts, closed (before the server) when the test ends. It fails
// the test if the Locker cannot be made (an invalid option).
func NewLocker(tb testing.TB, opts ...redlock.Option) (*redlock.Locker, *Server) {
	tb.Helper()
	s := NewServer(tb)
	return s.NewLocker(tb, opts...), s
}

// NewLocker returns another Locker on s (another process, as far as the
// locks are concerned), with [Defaults] and then opts, closed when the test
// ends.
func (s *Server) NewLocker(tb testing.TB, opts ...redlock.Option) *redlock.Locker {
	tb.Helper()
	lk, err := redlock.NewLocker(s.Client, append(append([]redlock.Option(nil), Defaults...), opts...)...)
	if err != nil {
		tb.Fatalf("redlocktest: NewLocker() = %v", err)
	}
	tb.Cleanup(func() { lk.Close() })
	return lk
}

// Expire removes l's key from the server, as if its lease had run out
// there: the watchdog's next renewal (or an Extend) reports the loss with
// reason [redlock.LossDeleted], and another owner can take the name at once.
func (s *Server) Expire(l *redlock.Lock) {
	s.Mini.Del(l.Key())
}

// Steal gives l's key to a new owner for ttl, as another process whose
// acquisition raced a lapse would, and returns that owner's value: the next
// renewal reports the loss with reason [redlock.LossTaken].
func (s *Server) Steal(l *redlock.Lock, ttl time.Duration) string {
	owner := uuid.NewString()
	s.Mini.Set(l.Key(), owner)
	s.Mini.SetTTL(l.Key(), ttl)
	return owner
}

// Fail makes every command fail (on) or succeed again (off), as an
// unreachable server would: renewals fail, and a held lock is lost at its
// Until with reason [redlock.LossExpired].
func (s *Server) Fail(on bool) {
	if on {
		s.Mini.SetError("redlocktest: server failing")
		return
	}
	s.Mini.SetError("")
}

// WaitLost waits for l's Done for at most within and returns l.Err(); it
// fails the test if Done does not close in time.
func WaitLost(tb testing.TB, l *redlock.Lock, within time.Duration) error {
	tb.Helper()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-l.Done():
		return l.Err()
	case <-t.C:
		tb.Fatalf("redlocktest: lock %q still held after %v", l.Name(), within)
		return nil
	}
}

// Holder returns the owner value stored under name's key (with the default
// key prefix), or "" when the name is free.
func (s *Server) Holder(name string) string {
	v, err := s.Client.Get(context.Background(), "{redlock:"+name+"}").Result()
	if err != nil {
		return ""
	}
	return v
}
