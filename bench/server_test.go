package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// server is one redis-server process started by the benchmarks, listening on
// 127.0.0.1 only, with persistence off.
type server struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

var (
	serversMu sync.Mutex
	servers   []*server // every server started, stopped by TestMain
	pool      = map[string][]*server{}
)

// errNoRedis makes the benchmarks skip: there is no redis-server to run.
var errNoRedis = errors.New("redis-server not found on PATH")

// getServers returns n servers for the group name, started on first use and
// shared by every benchmark that asks for the same group, so that the
// libraries compared side by side run against the same processes.
func getServers(tb testing.TB, group string, n int) []*server {
	tb.Helper()
	serversMu.Lock()
	defer serversMu.Unlock()
	if s := pool[group]; len(s) == n {
		return s
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Skipf("skipping: %v", errNoRedis)
	}
	var got []*server
	for range n {
		s, err := startServer(bin)
		if err != nil {
			tb.Fatalf("starting redis-server: %v", err)
		}
		servers = append(servers, s)
		got = append(got, s)
	}
	pool[group] = got
	return got
}

// stopAll kills every server started; TestMain calls it after the run.
func stopAll() {
	serversMu.Lock()
	defer serversMu.Unlock()
	for _, s := range servers {
		s.stop()
	}
	servers, pool = nil, map[string][]*server{}
}

func TestMain(m *testing.M) {
	code := m.Run()
	stopAll()
	os.Exit(code)
}

// freePort asks the kernel for a free loopback port. Another process may
// take it before redis-server binds it; startServer retries then.
func freePort() (int, error) {
	for range 10 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port != 6379 {
			return port, nil
		}
	}
	return 0, errors.New("no free port other than 6379")
}

func startServer(bin string) (*server, error) {
	var lastErr error
	for range 5 {
		s, err := tryStart(bin)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func tryStart(bin string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redlock-bench-")
	if err != nil {
		return nil, err
	}
	s := &server{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		dir:  dir,
		done: make(chan struct{}),
	}
	s.cmd = exec.Command(bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", dir,
		"--logfile", "",
		"--loglevel", "warning",
	)
	s.cmd.SysProcAttr = sysProcAttr()
	out := &strings.Builder{}
	var outMu sync.Mutex
	s.cmd.Stdout = writerFunc(func(p []byte) (int, error) { outMu.Lock(); defer outMu.Unlock(); return out.Write(p) })
	s.cmd.Stderr = s.cmd.Stdout
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	if err := s.waitReady(5 * time.Second); err != nil {
		s.stop()
		outMu.Lock()
		defer outMu.Unlock()
		return nil, fmt.Errorf("%w; output: %s", err, out.String())
	}
	return s, nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// waitReady polls with a raw PING until the server answers and INFO names
// our process id, so that a stranger that took the port is never used.
func (s *server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	want := "process_id:" + strconv.Itoa(s.cmd.Process.Pid)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return errors.New("redis-server exited before it was ready (port taken?)")
		default:
		}
		info, err := s.rawInfo("server", 500*time.Millisecond)
		if err == nil {
			if strings.Contains(info, want) {
				return nil
			}
			return fmt.Errorf("%s is served by another process", s.Addr)
		}
		lastErr = err
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("redis-server on %s not ready: %w", s.Addr, lastErr)
}

// rawInfo sends INFO section over a fresh connection, bypassing every client
// library, so that it never shows up in a library's command counts.
func (s *server) rawInfo(section string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.Addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintf(c, "INFO %s\r\n", section); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "$") {
		return "", fmt.Errorf("INFO answered %q", line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil {
		return "", err
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func (s *server) stop() {
	select {
	case <-s.done:
	default:
		_ = s.cmd.Process.Kill()
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
		}
	}
	_ = os.RemoveAll(s.dir)
}
