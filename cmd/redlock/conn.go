package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
)

const defaultURL = "redis://127.0.0.1:6379/0"

// locks is what the commands use of a *redlock.Locker or *redlock.Redlock.
type locks interface {
	Lock(ctx context.Context, name string, opts ...redlock.Option) (*redlock.Lock, error)
	TryLock(ctx context.Context, name string, opts ...redlock.Option) (*redlock.Lock, error)
	Inspect(ctx context.Context, name string) (redlock.Holder, error)
	Release(ctx context.Context, name, owner string) error
	Close() error
}

// target is the Redis deployment a command works on: one server, or the
// independent masters of a Redlock.
type target struct {
	clients []*redis.Client
	addrs   []string
	quorum  int
	timeout time.Duration
}

// dial makes the clients for c: --redlock, else --addr, else $REDIS_URL,
// else the default URL. It connects to nothing yet; its errors are the
// user's (a URL that does not parse).
func dial(c *connFlags) (*target, error) {
	source, urls := "--addr", []string{c.addr}
	switch {
	case c.redlock != "":
		source, urls = "--redlock", strings.Split(c.redlock, ",")
	case c.addr == "":
		source, urls = "$REDIS_URL", []string{os.Getenv("REDIS_URL")}
		if urls[0] == "" {
			source, urls[0] = "the default URL", defaultURL
		}
	}
	t := &target{quorum: len(urls)/2 + 1, timeout: c.timeout}
	for _, u := range urls {
		opt, err := clientOptions(strings.TrimSpace(u), c.timeout)
		if err != nil {
			t.close()
			return nil, fmt.Errorf("%s %q: %w", source, u, err)
		}
		t.clients = append(t.clients, redis.NewClient(opt))
		t.addrs = append(t.addrs, opt.Addr)
	}
	return t, nil
}

// clientOptions parses a go-redis URL (a bare host:port is taken as
// redis://host:port). Timeouts the URL does not set are --timeout, and
// calls honour ctx deadlines, so no call outlives the bound.
func clientOptions(raw string, timeout time.Duration) (*redis.Options, error) {
	if raw == "" {
		return nil, errors.New("empty Redis URL")
	}
	if !strings.Contains(raw, "://") {
		raw = "redis://" + raw
	}
	opt, err := redis.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	for _, d := range []*time.Duration{&opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout} {
		if *d == 0 {
			*d = timeout
		}
	}
	if opt.MaxRetries == 0 {
		// No hidden retries unless the URL asks for them (max_retries): a
		// refused connection is reported at once, with its cause, and the
		// library retries lock operations itself.
		opt.MaxRetries = -1
	}
	opt.ContextTimeoutEnabled = true
	return opt, nil
}

// openLocks dials the target of cf, checks that it answers, and makes the
// Locker (one server) or Redlock (several) with the key prefix of cf and
// opts. A failure is reported on stderr as the failure of op on name, with
// its exit code: 2 for a bad configuration, 69 for Redis.
func openLocks(c *command, cf *connFlags, name string, stderr io.Writer, opts ...redlock.Option) (*target, locks, int, bool) {
	t, err := dial(cf)
	if err != nil {
		return nil, nil, c.bad(stderr, "%s", oneLine(err)), false
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
	defer cancel()
	if err := t.ping(ctx); err != nil {
		t.close()
		return nil, nil, t.fail(stderr, c.op(name), err), false
	}
	// Ask each server its role while the constructor warms up (it waits
	// as long for a silent server): a replica is named as one, rather
	// than by what it does to a write (READONLY), to a release (the key it
	// cannot delete looks "not held") or to a Redlock ("same dataset").
	rctx, rcancel := context.WithTimeout(ctx, roleWait)
	defer rcancel()
	roles := make(chan map[int]string, 1)
	go func() { roles <- t.replicas(rctx) }()
	lk, err := t.locks(append([]redlock.Option{redlock.WithKeyPrefix(cf.prefix)}, opts...))
	if code, ok := t.checkReplicas(c, name, <-roles, stderr); !ok {
		if err == nil {
			_ = lk.Close()
		}
		t.close()
		return nil, nil, code, false
	}
	if err != nil {
		t.close()
		return nil, nil, c.bad(stderr, "%s", plain(err)), false
	}
	return t, lk, 0, true
}

// roleWait bounds the wait for the servers' roles: as long as the
// constructors wait for a silent server, so a hung one costs no more.
const roleWait = time.Second

// replicas asks every server its ROLE and returns, for each one that says
// it is a replica, the address of its master. A server that refuses ROLE
// (an ACL without it) or does not answer before ctx ends is not listed:
// the library still finds its READONLY, or its duplicate dataset.
func (t *target) replicas(ctx context.Context) map[int]string {
	type role struct {
		node   int
		master string // "" for a master
	}
	ch := make(chan role, len(t.clients)) // buffered: an early return leaks nothing
	for i, cl := range t.clients {
		go func() {
			r := role{node: i}
			// ROLE of a replica: ["slave", host, port, state, offset].
			if v, err := cl.Do(ctx, "ROLE").Slice(); err == nil && len(v) >= 3 && v[0] == "slave" {
				r.master = net.JoinHostPort(fmt.Sprint(v[1]), fmt.Sprint(v[2]))
			}
			ch <- r
		}()
	}
	out := map[int]string{}
	for range t.clients {
		select {
		case r := <-ch:
			if r.master != "" {
				out[r.node] = r.master
			}
		case <-ctx.Done():
			return out
		}
	}
	return out
}

// checkReplicas says what the replicas among t's servers mean for c: a
// Redlock needs independent masters (a usage error, exit 2); one server
// that is a replica takes no write (run, unlock: exit 69), and what it
// shows may lag its master (status, leader: said on stderr, then shown).
func (t *target) checkReplicas(c *command, name string, replicas map[int]string, stderr io.Writer) (int, bool) {
	if len(replicas) == 0 {
		return 0, true
	}
	if len(t.clients) > 1 {
		var which []string
		for i := range t.clients {
			if m, ok := replicas[i]; ok {
				which = append(which, t.addrs[i]+" is a replica of "+m)
			}
		}
		return c.bad(stderr, "--redlock: %s, not a master: a Redlock needs independent masters", strings.Join(which, "; ")), false
	}
	if c.readOnly {
		fmt.Fprintf(stderr, "redlock: %s: %s is a replica of %s: its copy may lag the master (--addr should name the master)\n",
			c.op(name), t.addrs[0], replicas[0])
		return 0, true
	}
	return fail(stderr, exitUnavailable, "%s: %s is a replica of %s (READONLY): --addr must name a master",
		c.op(name), t.addrs[0], replicas[0]), false
}

// locks makes the Locker (one server) or the Redlock (several) of t.
func (t *target) locks(opts []redlock.Option) (locks, error) {
	if len(t.clients) == 1 {
		lk, err := redlock.NewLocker(t.clients[0], opts...)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return lk, nil
	}
	clients := make([]redlock.Client, len(t.clients))
	for i, cl := range t.clients {
		clients[i] = cl
	}
	r, err := redlock.NewRedlock(clients, opts...)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// fail reports err as the failure of op ("status NAME"), with the cause
// explain finds and its exit code (69 when it finds none).
func (t *target) fail(stderr io.Writer, op string, err error) int {
	code, why := t.explain(err)
	if code == 0 {
		code = exitUnavailable
	}
	return fail(stderr, code, "%s: %s", op, why)
}

// ping returns nil once a quorum of the servers answered PING, or the
// joined errors of those that did not (a NodeError each, as the library
// reports a node) when that is no longer possible or ctx ends.
func (t *target) ping(ctx context.Context) error {
	ch := make(chan error, len(t.clients)) // buffered: an early return leaks nothing
	for i, cl := range t.clients {
		go func() {
			err := cl.Ping(ctx).Err()
			if err != nil {
				err = &redlock.NodeError{Node: i, Addr: t.addrs[i], Err: err}
			}
			ch <- err
		}()
	}
	ok := 0
	var errs []error
	for range t.clients {
		err := <-ch
		if err == nil {
			ok++
		} else {
			errs = append(errs, err)
		}
		if ok >= t.quorum {
			return nil
		}
		if len(errs) > len(t.clients)-t.quorum {
			break
		}
	}
	return errors.Join(errs...)
}

// reachable pings the servers every interval until ctx ends, and calls
// lost once a quorum has not answered for --timeout: Lock itself retries a
// silent server for as long as it may wait.
func (t *target) reachable(ctx context.Context, lost func(error)) {
	every := min(max(t.timeout/4, 50*time.Millisecond), time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, t.timeout)
		err := t.ping(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			lastOK = time.Now()
		case time.Since(lastOK) >= t.timeout:
			lost(err)
			return
		}
	}
}

func (t *target) close() {
	for _, cl := range t.clients {
		_ = cl.Close()
	}
}

// nopLogger swallows go-redis's internal log lines (dial failures, pool
// notices), so that stderr carries only redlock's own one-line messages.
type nopLogger struct{}

func (nopLogger) Printf(context.Context, string, ...any) {}

func silenceGoRedis() { redis.SetLogger(nopLogger{}) }
