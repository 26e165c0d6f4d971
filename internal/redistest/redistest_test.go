package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// TestMain checks that the proxies, process waiters and clients of every
// test have ended by the time the tests are done, with go-redis's log of
// the redials to killed servers turned off.
func TestMain(m *testing.M) {
	QuietGoRedis()
	goleak.VerifyTestMain(m)
}

// rawConn is a plain TCP connection speaking inline Redis commands. The
// tests use it where go-redis would get in the way: go-redis ignores
// context deadlines on sockets by default and adds its own handshake.
type rawConn struct {
	t    testing.TB
	conn net.Conn
	r    *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &rawConn{t: t, conn: conn, r: bufio.NewReader(conn)}
}

// send writes one inline command.
func (c *rawConn) send(cmd string) {
	c.t.Helper()
	if err := c.conn.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
		c.t.Fatal(err)
	}
	if _, err := io.WriteString(c.conn, cmd+"\r\n"); err != nil {
		c.t.Fatalf("write %q: %v", cmd, err)
	}
}

// readLine reads one reply line, waiting at most timeout.
func (c *rawConn) readLine(timeout time.Duration) (string, error) {
	if err := c.conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	return strings.TrimSuffix(line, "\r\n"), err
}

// expectLine reads one reply line and fails the test unless it is want.
func (c *rawConn) expectLine(want string) {
	c.t.Helper()
	got, err := c.readLine(5 * time.Second)
	if err != nil {
		c.t.Fatalf("reading reply (want %q): %v", want, err)
	}
	if got != want {
		c.t.Fatalf("reply = %q, want %q", got, want)
	}
}

// expectTimeout reads with a deadline of timeout and fails the test unless
// the read times out with nothing received.
func (c *rawConn) expectTimeout(timeout time.Duration) {
	c.t.Helper()
	got, err := c.readLine(timeout)
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		c.t.Fatalf("read = %q, %v; want a timeout", got, err)
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStartServesCommands(t *testing.T) {
	t.Parallel()
	s := Start(t)

	host, port, err := net.SplitHostPort(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if host != "127.0.0.1" || port == "6379" || port == "0" {
		t.Fatalf("Addr() = %q, want 127.0.0.1 and a port other than 0 and 6379", s.Addr())
	}

	c := s.Client(t)
	ctx := ctxT(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want \"v\"", got, err)
	}
	if got := s.Do(t, "GET", "k"); got != "v" {
		t.Fatalf("Do(GET) = %#v, want \"v\"", got)
	}
	if got := s.Do(t, "GET", "missing"); got != nil {
		t.Fatalf("Do(GET missing) = %#v, want nil", got)
	}
	if got := s.Do(t, "DEBUG", "SLEEP", "0"); got != "OK" {
		t.Fatalf("Do(DEBUG SLEEP 0) = %#v, want OK (DEBUG must be enabled)", got)
	}

	cfg, err := c.ConfigGet(ctx, "*").Result()
	if err != nil {
		t.Fatalf("CONFIG GET: %v", err)
	}
	for key, want := range map[string]string{
		"save":       "",
		"appendonly": "no",
		"bind":       "127.0.0.1",
		"port":       port,
	} {
		if cfg[key] != want {
			t.Errorf("config %s = %q, want %q", key, cfg[key], want)
		}
	}
	if !strings.Contains(cfg["dir"], "redistest-") {
		t.Errorf("config dir = %q, want a redistest temporary directory", cfg["dir"])
	}
}

func TestStartExtraArgsOverrideDefaults(t *testing.T) {
	t.Parallel()
	s := Start(t, "--appendonly", "yes")
	ctx := ctxT(t)
	check := func(when string) {
		t.Helper()
		cfg, err := s.Client(t).ConfigGet(ctx, "appendonly").Result()
		if err != nil {
			t.Fatalf("%s: CONFIG GET: %v", when, err)
		}
		if cfg["appendonly"] != "yes" {
			t.Fatalf("%s: appendonly = %q, want yes", when, cfg["appendonly"])
		}
	}
	check("after Start")
	s.Restart(t)
	check("after Restart")
}

func TestStartN(t *testing.T) {
	t.Parallel()
	servers := StartN(t, 3)
	if len(servers) != 3 {
		t.Fatalf("StartN(3) returned %d servers", len(servers))
	}
	seen := map[string]bool{}
	for i, s := range servers {
		if seen[s.Addr()] {
			t.Fatalf("address %s returned twice", s.Addr())
		}
		seen[s.Addr()] = true
		s.Do(t, "SET", "k", strconv.Itoa(i))
	}
	// The servers are independent: each kept its own value.
	for i, s := range servers {
		if got := s.Do(t, "GET", "k"); got != strconv.Itoa(i) {
			t.Errorf("server %d: GET k = %#v, want %q", i, got, strconv.Itoa(i))
		}
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := dialRaw(t, s.Addr())
	c.send("PING")
	c.expectLine("+PONG")

	s.Pause(t)
	c.send("PING")
	c.expectTimeout(200 * time.Millisecond)

	s.Resume(t)
	// The PING sent while paused waited in the socket buffer.
	c.expectLine("+PONG")
	c.send("PING")
	c.expectLine("+PONG")
}

func TestRestartLosesDataAndKeepsPort(t *testing.T) {
	t.Parallel()
	s := Start(t)
	addr := s.Addr()
	c := s.Client(t)
	ctx := ctxT(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	dir := s.Do(t, "CONFIG", "GET", "dir")

	s.Restart(t)

	if s.Addr() != addr {
		t.Fatalf("Addr() changed from %s to %s", addr, s.Addr())
	}
	if got := s.Do(t, "GET", "k"); got != nil {
		t.Fatalf("GET k after Restart = %#v, want nil", got)
	}
	if got := s.Do(t, "CONFIG", "GET", "dir"); fmt.Sprint(got) == fmt.Sprint(dir) {
		t.Fatalf("Restart reused the directory %v", got)
	}
	// The existing client reconnects to the same address. Its pooled
	// connection died with the old server, and with retries disabled the
	// first command may report that; the second must use a new connection.
	var err error
	for range 2 {
		if err = c.Ping(ctx).Err(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("client did not reconnect after Restart: %v", err)
	}
}

func TestRestartPausedServer(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.Pause(t)
	s.Restart(t)
	c := dialRaw(t, s.Addr())
	c.send("PING")
	c.expectLine("+PONG")
}

func TestKill(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	ctx := ctxT(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING before Kill: %v", err)
	}

	s.Kill(t)

	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Kill succeeded")
	}
	if conn, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		_ = conn.Close()
		t.Fatal("dial after Kill succeeded")
	}
	s.Kill(t) // a no-op on a server that is down

	s.Restart(t)
	raw := dialRaw(t, s.Addr())
	raw.send("PING")
	raw.expectLine("+PONG")
}

func TestACLUser(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.ACLUser(t, "app", "secret", "~*", "+@all")
	ctx := ctxT(t)

	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "app", Password: "secret", MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET as the new user: %v", err)
	}
	// Redis 7 gives new users no channels (acl-pubsub-default
	// resetchannels), and "+@all" does not change that.
	err := c.Publish(ctx, "ch", "m").Err()
	if err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Fatalf("PUBLISH without channel permission: %v, want a NOPERM error", err)
	}

	// Calling ACLUser again adds rules.
	s.ACLUser(t, "app", "secret", "&ch")
	if err := c.Publish(ctx, "ch", "m").Err(); err != nil {
		t.Fatalf("PUBLISH after granting the channel: %v", err)
	}

	wrong := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "app", Password: "wrong", MaxRetries: -1})
	t.Cleanup(func() { _ = wrong.Close() })
	if err := wrong.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("PING with a wrong password: %v, want a WRONGPASS error", err)
	}
}

func TestProxyForwards(t *testing.T) {
	t.Parallel()
	s := Start(t)
	p := NewProxy(t, s.Addr())
	if host, _, _ := net.SplitHostPort(p.Addr()); host != "127.0.0.1" {
		t.Fatalf("proxy Addr() = %q, want 127.0.0.1", p.Addr())
	}

	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t)
	// Larger than one proxy chunk, to exercise forwarding in pieces.
	big := strings.Repeat("x", 3*proxyChunkSize+7)
	if err := c.Set(ctx, "k", big, 0).Err(); err != nil {
		t.Fatalf("SET through proxy: %v", err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != big {
		t.Fatalf("GET through proxy: %d bytes, %v; want %d bytes", len(got), err, len(big))
	}
	if got := s.Do(t, "STRLEN", "k"); got != int64(len(big)) {
		t.Fatalf("STRLEN on the server = %#v, want %d", got, len(big))
	}
}

func TestProxySetDelay(t *testing.T) {
	t.Parallel()
	s := Start(t)
	p := NewProxy(t, s.Addr())
	c := dialRaw(t, p.Addr())

	const delay = 150 * time.Millisecond
	p.SetDelay(delay)
	start := time.Now()
	c.send("PING")
	c.expectLine("+PONG")
	if rtt := time.Since(start); rtt < delay {
		t.Fatalf("round trip with delay %v took %v", delay, rtt)
	}

	// Without the delay the reply arrives well before the deadline that
	// expectTimeout would need; the exact time is not asserted because it
	// depends on the machine's load.
	p.SetDelay(0)
	c.send("PING")
	c.expectLine("+PONG")
}

func TestProxyBlackhole(t *testing.T) {
	t.Parallel()
	s := Start(t)
	p := NewProxy(t, s.Addr())
	c := dialRaw(t, p.Addr())
	c.send("PING")
	c.expectLine("+PONG")

	p.Blackhole(true)
	c.send("PING")
	c.expectTimeout(200 * time.Millisecond)

	// A new connection is accepted but gets no answer either.
	c2 := dialRaw(t, p.Addr())
	c2.send("PING")
	c2.expectTimeout(200 * time.Millisecond)

	p.Blackhole(false)
	// The connection survived, and the dropped PING stays dropped: the
	// next reply is the answer to the next command.
	c.send("ECHO after")
	c.expectLine("$5")
	c.expectLine("after")
}

func TestProxyBlackholeDropsDelayedData(t *testing.T) {
	t.Parallel()
	s := Start(t)
	p := NewProxy(t, s.Addr())
	c := dialRaw(t, p.Addr())

	p.SetDelay(100 * time.Millisecond)
	c.send("PING")
	p.Blackhole(true)
	// Whether the proxy read the +PONG before or after the partition
	// began, it must never deliver it: it is dropped either on reading or
	// when its delay ends.
	c.expectTimeout(300 * time.Millisecond)

	p.Blackhole(false)
	p.SetDelay(0)
	c.send("ECHO after")
	c.expectLine("$5")
	c.expectLine("after")
}

// dropClient returns a client of p with a single connection, already
// established, so that the next reply p drops is the reply to the next
// command rather than to the connection handshake.
func dropClient(t *testing.T, p *Proxy, maxRetries int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1, MaxRetries: maxRetries})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(ctxT(t)).Err(); err != nil {
		t.Fatalf("PING through proxy: %v", err)
	}
	return c
}

func TestProxyDropRepliesRetried(t *testing.T) {
	t.Parallel()
	s := Start(t)
	p := NewProxy(t, s.Addr())
	c := dropClient(t, p, 0) // 0: go-redis's default of 3 retries
	ctx := ctxT(t)

	p.DropReplies(1)
	// The first INCR is executed but its reply lost; go-redis sees the
	// connection end and sends INCR again on a new connection.
	if got, err := c.Incr(ctx, "k").Result(); err != nil || got != 2 {
		t.Fatalf("INCR with one reply dropped = %d, %v; want 2 (executed twice)", got, err)
	}
	if got := s.Do(t, "GET", "k"); got != "2" {
		t.Fatalf("GET k on the server = %#v, want \"2\"", got)
	}

	// The drop is used up.
	if got, err := c.Incr(ctx, "k").Result(); err != nil || got != 3 {
		t.Fatalf("INCR with no drops pending = %d, %v; want 3", got, err)
	}
}

func TestProxyDropRepliesOnePerConnection(t *testing.T) {
	t.Parallel()
	s := Start(t)
	p := NewProxy(t, s.Addr())
	c1, c2 := dialRaw(t, p.Addr()), dialRaw(t, p.Addr())
	for _, c := range []*rawConn{c1, c2} {
		c.send("PING")
		c.expectLine("+PONG")
	}

	p.DropReplies(2)
	// Two replies in a row on one connection use up only one drop: the
	// second never reaches the proxy's count, as the connection is gone.
	c1.send("INCR k\r\nINCR k")
	if got, err := c1.readLine(5 * time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("read on the first connection = %q, %v; want EOF", got, err)
	}
	c2.send("INCR k")
	if got, err := c2.readLine(5 * time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("read on the second connection = %q, %v; want EOF", got, err)
	}
	// All three commands were executed, although no reply came back.
	if got := s.Do(t, "GET", "k"); got != "3" {
		t.Fatalf("GET k on the server = %#v, want \"3\"", got)
	}
	c3 := dialRaw(t, p.Addr())
	c3.send("INCR k")
	c3.expectLine(":4")
}

func TestProxyDropRepliesNoRetry(t *testing.T) {
	t.Parallel()
	s := Start(t)
	p := NewProxy(t, s.Addr())
	c := dropClient(t, p, -1)
	ctx := ctxT(t)

	p.DropReplies(1)
	if got, err := c.Incr(ctx, "k").Result(); err == nil {
		t.Fatalf("INCR with its reply dropped and no retries = %d, want an error", got)
	} else if !errors.Is(err, io.EOF) {
		t.Logf("INCR error is %v, not EOF", err)
	}
	if got := s.Do(t, "GET", "k"); got != "1" {
		t.Fatalf("GET k on the server = %#v, want \"1\": the command must have been executed", got)
	}
	// The drop is used up: the next command gets a new connection that
	// works.
	if got, err := c.Incr(ctx, "k").Result(); err != nil || got != 2 {
		t.Fatalf("INCR after the drop = %d, %v; want 2", got, err)
	}
}

func TestProxyDropRepliesCancel(t *testing.T) {
	t.Parallel()
	s := Start(t)
	p := NewProxy(t, s.Addr())
	c := dropClient(t, p, -1)
	ctx := ctxT(t)

	p.DropReplies(3)
	p.DropReplies(0)
	if got, err := c.Incr(ctx, "k").Result(); err != nil || got != 1 {
		t.Fatalf("INCR after DropReplies(0) = %d, %v; want 1", got, err)
	}
}

func TestProxyToDeadServerClosesConnection(t *testing.T) {
	t.Parallel()
	s := Start(t)
	p := NewProxy(t, s.Addr())
	s.Kill(t)

	c := dialRaw(t, p.Addr())
	if got, err := c.readLine(5 * time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("read through proxy to a dead server = %q, %v; want EOF", got, err)
	}
}

func TestProxyCloseEndsConnections(t *testing.T) {
	t.Parallel()
	s := Start(t)
	p := NewProxy(t, s.Addr())
	c := dialRaw(t, p.Addr())
	c.send("PING")
	c.expectLine("+PONG")

	// Close must not wait out the delay of a reply held by the proxy.
	p.SetDelay(time.Hour)
	c.send("PING")
	p.Close()
	p.Close() // idempotent; the cleanup calls it once more

	if got, err := c.readLine(5 * time.Second); err == nil {
		t.Fatalf("read after Close = %q, want an error", got)
	}
	// The listener itself, not a dial to its port: once closed, the port
	// is free, and another test on a busy machine may listen on it.
	tl := p.ln.(*net.TCPListener)
	_ = tl.SetDeadline(time.Now().Add(time.Second))
	if _, err := tl.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept on the proxy's listener after Close = %v, want net.ErrClosed", err)
	}
}

func TestNewProxyRejectsUnsafeTargets(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"10.0.0.1:7000", "localhost:7000", "127.0.0.1:6379", "127.0.0.1"} {
		t.Run(target, func(t *testing.T) {
			rec := runRecording(t, func(tb testing.TB) { NewProxy(tb, target) })
			if !rec.fatal {
				t.Fatalf("NewProxy(%q) did not fail the test", target)
			}
		})
	}
}

func TestRequireBinaryMissing(t *testing.T) {
	t.Parallel()
	const name = "redistest-no-such-redis-server"

	rec := runRecording(t, func(tb testing.TB) { requireBinary(tb, name, false) })
	if !rec.skipped || rec.fatal {
		t.Errorf("outside CI: skipped=%v fatal=%v, want a skip", rec.skipped, rec.fatal)
	}
	if !strings.Contains(rec.msg, name) {
		t.Errorf("skip message %q does not name the binary", rec.msg)
	}

	rec = runRecording(t, func(tb testing.TB) { requireBinary(tb, name, true) })
	if !rec.fatal || rec.skipped {
		t.Errorf("in CI: skipped=%v fatal=%v, want a failure", rec.skipped, rec.fatal)
	}
}

func TestRequireRedisServerFindsBinary(t *testing.T) {
	t.Parallel()
	path := RequireRedisServer(t)
	if fi, err := os.Stat(path); err != nil || fi.IsDir() {
		t.Fatalf("RequireRedisServer() = %q: %v", path, err)
	}
}

// recordingTB is a testing.TB that records Skip and Fatal instead of
// acting on the test, so that tests can check when helpers give up.
type recordingTB struct {
	testing.TB
	skipped, fatal bool
	msg            string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fatal, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runRecording runs f with a recordingTB in a goroutine of its own, since
// the recorder ends the calling goroutine as t.Skip and t.Fatal do.
func runRecording(t *testing.T, f func(testing.TB)) *recordingTB {
	rec := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(rec)
	}()
	<-done
	return rec
}

func TestStartGivesUpWhenServerKeepsExiting(t *testing.T) {
	t.Parallel()
	// Make every attempt exit at once by overriding the port with one that
	// is taken.
	taken := listenLoopback(t)
	rec := runRecording(t, func(tb testing.TB) { Start(tb, "--port", portOf(t, taken.Addr().String())) })
	if !rec.fatal {
		t.Fatal("Start did not fail")
	}
	if !strings.Contains(rec.msg, "exited early on 5 ports") || !strings.Contains(rec.msg, "Address already in use") {
		t.Fatalf("failure message lacks the attempts or the server output:\n%s", rec.msg)
	}
}

func TestRestartGivesUpWhenPortTaken(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.Kill(t)
	taken, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatalf("taking the killed server's port: %v", err)
	}
	t.Cleanup(func() { _ = taken.Close() })

	rec := runRecording(t, s.Restart)
	if !rec.fatal {
		t.Fatal("Restart did not fail")
	}
	if !strings.Contains(rec.msg, "failed 5 times") || !strings.Contains(rec.msg, "Address already in use") {
		t.Fatalf("failure message lacks the attempts or the server output:\n%s", rec.msg)
	}

	// Once the port is free again the server can come back.
	_ = taken.Close()
	s.Restart(t)
	c := dialRaw(t, s.Addr())
	c.send("PING")
	c.expectLine("+PONG")
}

func listenLoopback(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

func portOf(t testing.TB, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}
