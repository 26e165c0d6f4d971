// Package redistest starts, breaks and restarts real redis-server processes
// for tests, including Sentinel-managed groups for failover tests, and
// provides a TCP proxy to inject latency, partitions, held and lost replies
// and cut connections.
//
// The fault kit: Server.Pause and Resume (SIGSTOP, SIGCONT), Kill, Restart
// (empty, same port), ACLUser; Proxy.SetDelay, Blackhole, Hold, Cut and
// DropReplies; StartPair for a master and a replica whose replication link
// can be held back, and Pair.Failover to promote a replica that missed
// writes (REPLICAOF NO ONE), the failover of the Redlock debate; Launch for
// servers shared beyond one test (benchmarks).
//
// Every server listens on a free port of 127.0.0.1 only, runs without
// persistence in its own temporary directory and is killed when the test
// ends. The package never talks to a server it did not start; in particular
// a server left running on the default port 6379 is never used.
//
// The package needs a Unix-like system, because breaking a server relies on
// job-control signals (SIGSTOP, SIGCONT, SIGKILL).
//
// Methods that take a testing.TB fail the test with t.Fatal and so, like
// t.Fatal itself, must be called from the goroutine running the test.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// defaultRedisPort is the port of a developer's own redis-server. It is
	// never handed out, so a test cannot touch that server's data.
	defaultRedisPort = 6379

	// maxStartAttempts bounds retries after a port race: another process
	// can bind the port between freePort closing it and redis-server
	// binding it, and redis-server then exits at once.
	maxStartAttempts = 5

	// maxRestartAttempts bounds retries when the same port cannot be bound
	// again right after the previous process died.
	maxRestartAttempts = 5

	// restartBackoff is the first pause between restart attempts; it
	// doubles after each attempt (50+100+200+400 ms at most in total).
	restartBackoff = 50 * time.Millisecond

	// readyTimeout bounds the wait for a new server to answer PING.
	readyTimeout = 5 * time.Second

	// clientTimeout is used for dialling, reading and writing by Client,
	// so that a paused or partitioned server makes a command fail quickly.
	clientTimeout = time.Second

	// adminTimeout bounds a whole Do call. It is longer than clientTimeout
	// so that Do can run slow commands such as DEBUG SLEEP.
	adminTimeout = 10 * time.Second
)

// RequireRedisServer returns the path of the redis-server executable found
// on PATH. When there is none it skips the test, unless the environment
// variable CI is "true": a CI job is expected to provide Redis, and a
// silently skipped suite there would look like a passing one, so it fails
// the test instead.
func RequireRedisServer(t testing.TB) string {
	t.Helper()
	return requireBinary(t, "redis-server", os.Getenv("CI") == "true")
}

// requireBinary is RequireRedisServer with the executable name and the CI
// flag as parameters, so that the missing-binary paths can be tested
// without changing PATH or CI for the whole test process.
func requireBinary(t testing.TB, name string, ci bool) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if ci {
		t.Fatalf("redistest: %s not found on PATH and CI=true, so Redis tests must not be skipped: %v", name, err)
	}
	t.Skipf("redistest: %s not found on PATH (install Redis to run this test): %v", name, err)
	return ""
}

// Server is a redis-server process started by Start. Its methods are safe
// for concurrent use, subject to the package rule that methods taking a
// testing.TB be called from the test goroutine.
type Server struct {
	bin   string
	port  int
	conf  string // configuration file contents, "" for none
	extra []string

	mu sync.Mutex
	p  *process // nil while the server is down
}

// Start starts a redis-server on a free port of 127.0.0.1, without
// persistence and in a fresh temporary directory, and returns once it
// answers PING. The extra arguments are passed to redis-server after the
// defaults, so they can override them (for example "--appendonly", "yes").
//
// Start skips or fails the test as RequireRedisServer does when
// redis-server is not installed. A cleanup registered on t kills the
// server with SIGKILL and removes its directory.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return startServer(t, "", extra)
}

// startServer is Start with the contents of a configuration file, passed
// to startProcess, which a sentinel needs. Restart writes the same
// configuration again.
func startServer(t testing.TB, conf string, extra []string) *Server {
	t.Helper()
	return startServerOn(t, conf, extra, freePort)
}

// startServerOn is startServer with the function that picks a port for
// each attempt: freeClusterPort for a Cluster node.
func startServerOn(t testing.TB, conf string, extra []string, pick func() (int, error)) *Server {
	t.Helper()
	s, err := launch(RequireRedisServer(t), conf, extra, pick)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { s.shutdown(t) })
	return s
}

// Launch starts a server as Start does, but not tied to a test: it is for
// servers that outlive one test, such as those shared by benchmarks. It
// returns an error instead of failing a test (also when redis-server is not
// installed: call RequireRedisServer first to skip instead), and the caller
// must call Stop.
func Launch(extra ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	return launch(bin, "", extra, freePort)
}

// Stop kills a server started by Launch, as the cleanup of Start does, and
// removes its directory. It is safe to call more than once.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(); err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	return nil
}

// launch starts redis-server bin on a port that pick finds free and waits
// until it answers, retrying on another port when the server exits at once
// (another process took the port between pick and redis-server binding it).
func launch(bin, conf string, extra []string, pick func() (int, error)) (*Server, error) {
	s := &Server{bin: bin, conf: conf, extra: slices.Clone(extra)}
	var failures []error
	for attempt := 1; attempt <= maxStartAttempts; attempt++ {
		port, err := pick()
		if err != nil {
			return nil, fmt.Errorf("redistest: finding a free port: %w", err)
		}
		p, err := startProcess(s.bin, port, s.conf, s.extra)
		if err != nil {
			return nil, fmt.Errorf("redistest: %w", err)
		}
		err = p.waitReady(readyTimeout)
		if err == nil {
			s.port, s.p = port, p
			return s, nil
		}
		stopErr := p.stop()
		if !errors.Is(err, errExited) {
			// The server is alive but not answering: retrying on another
			// port would only hide whatever is wrong with it.
			return nil, errors.Join(fmt.Errorf("redistest: %w\n%s", err, p.describe()), stopErr)
		}
		failures = append(failures, errors.New(p.describe()))
	}
	return nil, fmt.Errorf("redistest: redis-server exited early on %d ports in a row:\n%w",
		maxStartAttempts, errors.Join(failures...))
}

// StartN starts n servers as Start does, for tests of Redlock across
// several independent instances.
func StartN(t testing.TB, n int, extra ...string) []*Server {
	t.Helper()
	if n < 1 {
		t.Fatalf("redistest: StartN needs at least one server, got n=%d", n)
	}
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = Start(t, extra...)
	}
	return servers
}

// Addr returns the server's address, "127.0.0.1:PORT". It stays the same
// across Restart, and is valid even while the server is down.
func (s *Server) Addr() string {
	return net.JoinHostPort(loopbackHost, strconv.Itoa(s.port))
}

// Client returns a new go-redis client connected to the server, closed by
// a cleanup registered on t.
//
// Timeouts are short (one second) so that a paused or killed server makes
// a command fail rather than hang the test. Retries are disabled: a retry
// hidden inside go-redis could run a non-idempotent script twice, which
// would mask exactly the bugs these tests look for.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:         s.Addr(),
		DialTimeout:  clientTimeout,
		ReadTimeout:  clientTimeout,
		WriteTimeout: clientTimeout,
		MaxRetries:   -1,
	})
	t.Cleanup(func() {
		// The test may already have closed the client itself; that is fine.
		_ = c.Close()
	})
	return c
}

// Do runs one command on a new connection that is closed before Do
// returns, and returns its reply as go-redis's Cmd.Result does. A nil reply
// (redis.Nil) is returned as nil; any other error fails the test. It is
// meant for administration in tests, such as DEBUG, SCRIPT FLUSH, GET or
// PTTL, independently of the clients under test.
func (s *Server) Do(t testing.TB, args ...any) any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	c := redis.NewClient(&redis.Options{
		Addr:         s.Addr(),
		DialTimeout:  clientTimeout,
		ReadTimeout:  adminTimeout,
		WriteTimeout: clientTimeout,
		MaxRetries:   -1,
		PoolSize:     1,
	})
	defer c.Close()
	v, err := c.Do(ctx, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		t.Fatalf("redistest: %v on %s: %v", args, s.Addr(), err)
	}
	return v
}

// Info returns the text of INFO section on the server, read on a new
// connection (see Do). Benchmarks read commandstats and cpu with it.
func (s *Server) Info(t testing.TB, section string) string {
	t.Helper()
	v, _ := s.Do(t, "INFO", section).(string)
	return v
}

// ACLUser creates the ACL user name on the server, enabled and with
// password, by running ACL SETUSER name on >password followed by rules,
// such as "~*", "+@all" or "&channel". A new user starts with no keys, no
// commands and, as Redis 7 defaults to acl-pubsub-default resetchannels,
// no pub/sub channels, so the rules must grant everything the user needs.
// If the user exists, ACL SETUSER adds to its rules, and a password
// already set stays valid next to the new one. Users are lost on Restart.
// ACLUser fails the test if the server rejects the command.
func (s *Server) ACLUser(t testing.TB, name, password string, rules ...string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", name, "on", ">" + password}
	for _, r := range rules {
		args = append(args, r)
	}
	s.Do(t, args...)
}

// Pause stops the server with SIGSTOP. It returns once the process is
// stopped, so that a command sent afterwards is certain not to be
// answered until Resume. Connections stay open: the kernel keeps
// accepting and buffering data for the stopped process, as for a server
// stuck in a long GC pause or a frozen VM.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.running(t, "Pause")
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("redistest: SIGSTOP to redis-server on %s: %v", s.Addr(), err)
	}
	// Signal delivery is asynchronous: without this wait a command written
	// right after Pause could still be served.
	if err := waitStopped(p.cmd.Process.Pid, readyTimeout); err != nil {
		t.Fatalf("redistest: redis-server on %s: %v", s.Addr(), err)
	}
}

// Resume continues a server stopped by Pause with SIGCONT. Resuming a
// server that is not paused has no effect.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.running(t, "Resume")
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("redistest: SIGCONT to redis-server on %s: %v", s.Addr(), err)
	}
}

// Kill kills the server with SIGKILL, so that it has no chance to answer
// or persist anything, and waits for it to exit. The server stays down
// until Restart. Killing a server that is down has no effect.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// Restart kills the server if it is running and starts a new, empty one on
// the same port, with the same arguments and a fresh directory, so that
// existing clients reconnect to it and find no keys and no cached scripts.
// It returns once the new server answers PING. Restart also brings back a
// server stopped by Kill.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(); err != nil {
		t.Fatalf("redistest: %v", err)
	}

	backoff := restartBackoff
	var failures []error
	for attempt := 1; attempt <= maxRestartAttempts; attempt++ {
		p, err := startProcess(s.bin, s.port, s.conf, s.extra)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		err = p.waitReady(readyTimeout)
		if err == nil {
			s.p = p
			return
		}
		if stopErr := p.stop(); stopErr != nil {
			t.Errorf("redistest: %v", stopErr)
		}
		if !errors.Is(err, errExited) {
			t.Fatalf("redistest: restart: %v\n%s", err, p.describe())
		}
		failures = append(failures, errors.New(p.describe()))
		if attempt < maxRestartAttempts {
			// The port is normally bindable as soon as the old process has
			// been reaped, but give the system a moment if it is not.
			time.Sleep(backoff)
			backoff *= 2
		}
	}
	t.Fatalf("redistest: restart on %s failed %d times:\n%v",
		s.Addr(), maxRestartAttempts, errors.Join(failures...))
}

// running returns the current process or fails the test, because pausing
// or resuming a server that is down is a bug in the test.
func (s *Server) running(t testing.TB, op string) *process {
	t.Helper()
	if s.p == nil {
		t.Fatalf("redistest: %s: redis-server on %s is down (killed and not restarted)", op, s.Addr())
	}
	return s.p
}

// stopLocked kills the current process, if any. s.mu must be held.
func (s *Server) stopLocked() error {
	if s.p == nil {
		return nil
	}
	err := s.p.stop()
	s.p = nil
	return err
}

// shutdown is the cleanup registered by Start.
func (s *Server) shutdown(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.p
	if err := s.stopLocked(); err != nil {
		t.Errorf("redistest: %v", err)
	}
	// The server log often explains a failure (for example a script error
	// or an out-of-memory refusal), and is lost once the test ends.
	if p != nil && t.Failed() {
		t.Logf("redistest: %s", p.describe())
	}
}

// freePort returns a port of 127.0.0.1 that was free a moment ago. The
// kernel picks ports for :0 from the ephemeral range, which does not
// contain 6379, but the check makes the guarantee explicit.
func freePort() (int, error) {
	for range maxStartAttempts {
		ln, err := net.Listen("tcp", net.JoinHostPort(loopbackHost, "0"))
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if err := ln.Close(); err != nil {
			return 0, err
		}
		if port != defaultRedisPort {
			return port, nil
		}
	}
	return 0, errors.New("the kernel kept offering the default Redis port 6379")
}

// clusterBusOffset is how far above its port a Cluster node listens for the
// cluster bus (Redis's fixed offset when cluster-port is not set).
const clusterBusOffset = 10000

// freeClusterPort returns a port of 127.0.0.1 that was free a moment ago,
// as freePort does, whose cluster bus port (port+10000) was free too: a
// node that cannot bind its bus port exits at start, and one above 55535
// has no bus port at all. The kernel's ephemeral range (32768-60999 on
// Linux) leaves most ports below that.
func freeClusterPort() (int, error) {
	var last error
	for range 10 * maxStartAttempts {
		port, err := freePort()
		if err != nil {
			return 0, err
		}
		if port+clusterBusOffset > 65535 {
			last = fmt.Errorf("port %d has no bus port", port)
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(loopbackHost, strconv.Itoa(port+clusterBusOffset)))
		if err != nil {
			last = err
			continue
		}
		if err := ln.Close(); err != nil {
			return 0, err
		}
		return port, nil
	}
	return 0, fmt.Errorf("no port with a free cluster bus port (port+%d): %w", clusterBusOffset, last)
}
