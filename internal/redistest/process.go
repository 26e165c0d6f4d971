package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// loopbackHost is the only address servers and proxies listen on.
	loopbackHost = "127.0.0.1"

	// pollInterval is how often waitReady probes a starting server.
	pollInterval = 5 * time.Millisecond

	// probeTimeout bounds one readiness probe, so that a probe stuck on
	// an unresponsive port cannot use up the whole readiness deadline.
	probeTimeout = 500 * time.Millisecond

	// killTimeout bounds the wait for a process to exit after SIGKILL. It
	// only expires if the process is stuck in the kernel.
	killTimeout = 10 * time.Second

	// pipeDrainTimeout bounds how long Wait keeps copying output after the
	// process has exited. A child forked by the server (BGSAVE, AOF
	// rewrite) inherits the output pipe and could keep Wait from returning.
	pipeDrainTimeout = time.Second
)

// errExited reports that redis-server exited before it was ready, which
// usually means its port was taken in the meantime.
var errExited = errors.New("redis-server exited before answering PING")

// process is one run of redis-server.
type process struct {
	cmd    *exec.Cmd
	addr   string
	dir    string
	output *syncBuffer

	// exited is cancelled once cmd.Wait has returned. It is a context
	// rather than a channel so that a probe can be cut short by it.
	exited     context.Context
	markExited context.CancelFunc
	waitErr    error // cmd.Wait's result, set before exited is cancelled
}

// configFileName is the name of the configuration file that startProcess
// writes into the process's directory when given one.
const configFileName = "redis.conf"

// startProcess starts redis-server on port without waiting for it to be
// ready. The caller must call stop.
//
// If conf is not empty, it is written to a configuration file in the
// process's directory, which is passed to redis-server as its first
// argument, as redis-server requires; the default arguments and then
// extra follow it and so override it. The file stays writable, which
// redis-server needs in sentinel mode to save its state. An empty conf
// starts redis-server without a configuration file.
func startProcess(bin string, port int, conf string, extra []string) (*process, error) {
	// Not t.TempDir: it is removed by a cleanup that may run before ours
	// has killed the server, and a server whose directory vanished can
	// misbehave while it is still running.
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("creating directory for redis-server: %w", err)
	}
	var args []string
	if conf != "" {
		// Absolute, because the server changes to --dir before it
		// rewrites the file.
		path, err := filepath.Abs(filepath.Join(dir, configFileName))
		if err == nil {
			err = os.WriteFile(path, []byte(conf), 0o600)
		}
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("writing redis-server configuration: %w", err)
		}
		args = append(args, path)
	}
	args = append(args,
		"--port", strconv.Itoa(port),
		"--bind", loopbackHost,
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--enable-debug-command", "local",
		"--repl-diskless-sync-delay", "0",
		"--daemonize", "no",
		"--logfile", "",
	)
	p := &process{
		cmd:    exec.Command(bin, append(args, extra...)...),
		addr:   net.JoinHostPort(loopbackHost, strconv.Itoa(port)),
		dir:    dir,
		output: &syncBuffer{},
	}
	p.exited, p.markExited = context.WithCancel(context.Background())
	p.cmd.Stdout = p.output
	p.cmd.Stderr = p.output
	p.cmd.SysProcAttr = sysProcAttr()
	p.cmd.WaitDelay = pipeDrainTimeout
	if err := p.cmd.Start(); err != nil {
		p.markExited()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting %s: %w", p.cmd, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		p.markExited()
	}()
	return p, nil
}

// waitReady polls the server until it answers PING, it exits (errExited)
// or timeout expires.
func (p *process) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-p.exited.Done():
			return fmt.Errorf("%w (%v)", errExited, p.waitErr)
		default:
		}
		if lastErr = p.probe(min(probeTimeout, time.Until(deadline))); lastErr == nil {
			return nil
		}
		select {
		case <-p.exited.Done():
			return fmt.Errorf("%w (%v)", errExited, p.waitErr)
		case <-ticker.C:
		}
	}
	return fmt.Errorf("redis-server on %s not ready after %v: %w", p.addr, timeout, lastErr)
}

// probe sends PING and INFO server and checks that the server answering is
// this process. Otherwise, if another server took the port first, that one
// would answer PING while ours is about to fail to bind, and the test would
// run against a stranger's server.
//
// The connection is dialled here, once, and handed to a go-redis client:
// go-redis's own dialling retries a refused connection, logs each failure
// and may keep a goroutine redialling after the client is closed, none of
// which a readiness poll wants. The probe is cut short as soon as our
// process exits.
func (p *process) probe(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(p.exited, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return err
	}
	var dialled atomic.Bool
	c := redis.NewClient(&redis.Options{
		Addr: p.addr,
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			if dialled.Swap(true) {
				return nil, errors.New("probe connection already used")
			}
			return conn, nil
		},
		DialTimeout:           timeout,
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		PoolSize:              1,
		DisableIdentity:       true,
	})
	defer c.Close()
	defer conn.Close()
	var ping *redis.StatusCmd
	var info *redis.StringCmd
	// Pipelined, so that one round trip answers both.
	_, err = c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		ping = pipe.Ping(ctx)
		info = pipe.Info(ctx, "server")
		return nil
	})
	if err := ping.Err(); err != nil {
		// For example LOADING while a configured AOF is being read.
		return fmt.Errorf("PING: %w", err)
	}
	if err != nil {
		return fmt.Errorf("INFO server: %w", err)
	}
	want := "process_id:" + strconv.Itoa(p.cmd.Process.Pid)
	for l := range strings.Lines(info.Val()) {
		if strings.TrimSpace(l) == want {
			return nil
		}
	}
	return fmt.Errorf("%s is served by another process, not pid %d", p.addr, p.cmd.Process.Pid)
}

// stop kills the server and everything it forked, waits for it to exit
// and removes its directory. It is safe to call more than once.
//
// It never sends SIGTERM: with save points configured SIGTERM makes Redis
// write dump.rdb on the way out, and a server whose directory has gone may
// not exit on SIGTERM at all.
func (p *process) stop() error {
	select {
	case <-p.exited.Done():
	default:
		// SIGKILL ends a stopped process too; SIGCONT first is cheap
		// insurance that a paused server is never left behind stopped
		// should the SIGKILL not reach it.
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		// The negative pid addresses the process group (see sysProcAttr),
		// which also holds any child forked for BGSAVE or AOF rewrite.
		// The leader had not been reaped an instant ago, so the group id
		// cannot realistically have been reused by now.
		if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
			_ = p.cmd.Process.Kill()
		}
	}
	select {
	case <-p.exited.Done():
	case <-time.After(killTimeout):
		return fmt.Errorf("redis-server (pid %d) on %s did not exit within %v of SIGKILL",
			p.cmd.Process.Pid, p.addr, killTimeout)
	}
	if err := os.RemoveAll(p.dir); err != nil {
		return fmt.Errorf("removing redis-server directory: %w", err)
	}
	return nil
}

// describe returns the command line and output of the process, for
// failure messages.
func (p *process) describe() string {
	return fmt.Sprintf("%q\n--- redis-server output ---\n%s--- end of output ---", p.cmd.Args, p.output)
}

// syncBuffer is a bytes.Buffer that the goroutines copying the server's
// stdout and stderr can write while a failure message reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
