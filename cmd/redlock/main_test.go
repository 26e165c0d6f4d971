//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redlockgo/redlock"
	"github.com/redlockgo/redlock/internal/redistest"
)

// bin is the redlock binary under test, built once by TestMain.
var bin string

// TestMain builds the command once for all tests (a build per test would
// cost a link each), and fails the run if a goroutine outlives the tests.
// go-redis's log of the tests' own clients is off (redistest.QuietGoRedis).
func TestMain(m *testing.M) {
	redistest.QuietGoRedis()
	dir, err := os.MkdirTemp("", "redlock-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "redlock")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// longWait bounds every wait of these tests on a process: generous, since
// other tests may load the machine; a correct run takes a fraction of it.
const longWait = 60 * time.Second

// proc is one redlock process started by a test.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr string // file paths
	exited         chan struct{}
}

// start starts the binary with args and extra environment, stdout and
// stderr to files (no copying goroutines; a grandchild holding them open
// cannot delay the test). REDIS_URL is removed from the inherited
// environment: a test talks only to servers it started.
func start(t *testing.T, env []string, stdin string, args ...string) *proc {
	t.Helper()
	dir := t.TempDir()
	p := &proc{stdout: filepath.Join(dir, "stdout"), stderr: filepath.Join(dir, "stderr"), exited: make(chan struct{})}
	out, err := os.Create(p.stdout)
	require.NoError(t, err)
	errf, err := os.Create(p.stderr)
	require.NoError(t, err)
	t.Cleanup(func() { out.Close(); errf.Close() })
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = out, errf
	if stdin != "" {
		p.cmd.Stdin = strings.NewReader(stdin)
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDIS_URL=") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, env...)
	require.NoError(t, p.cmd.Start())
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// wait waits for the process to exit, at most d, and returns its exit code.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(d):
		t.Fatalf("redlock %v still running after %v; stderr: %s", p.cmd.Args[1:], d, p.errText(t))
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *proc) outText(t *testing.T) string { t.Helper(); return readFile(t, p.stdout) }
func (p *proc) errText(t *testing.T) string { t.Helper(); return readFile(t, p.stderr) }

// rl runs the binary to completion and returns its exit code, stdout and
// stderr.
func rl(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	p := start(t, env, "", args...)
	code := p.wait(t, longWait)
	return code, p.outText(t), p.errText(t)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	require.NoError(t, err)
	return string(b)
}

// waitFor polls path until cond holds for its contents, bounded by
// longWait: it waits on another process, which only the file reports on.
func waitFor(t *testing.T, path string, cond func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(longWait)
	for {
		s := readFile(t, path)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after %v: %q, condition not met", filepath.Base(path), longWait, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func contains(sub string) func(string) bool {
	return func(s string) bool { return strings.Contains(s, sub) }
}

// holdScript is a child that records its lock in dir/info ("OWNER TOKEN"),
// then waits for dir/go to appear, at most 60s (bounded like everything).
func holdScript(dir string) string {
	return fmt.Sprintf(`echo "$REDLOCK_OWNER $REDLOCK_TOKEN" > %[1]s/info.tmp && mv %[1]s/info.tmp %[1]s/info
i=0; while [ ! -e %[1]s/go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done`, dir)
}

// holder reads what holdScript recorded, once it has.
func holder(t *testing.T, dir string) (owner string, token int64) {
	t.Helper()
	f := strings.Fields(waitFor(t, filepath.Join(dir, "info"), func(s string) bool { return strings.HasSuffix(s, "\n") }))
	require.Len(t, f, 2)
	token, err := strconv.ParseInt(f[1], 10, 64)
	require.NoError(t, err)
	return f[0], token
}

func touch(t *testing.T, path string) { t.Helper(); require.NoError(t, os.WriteFile(path, nil, 0o600)) }

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// oneLineStderr checks that stderr is exactly one line of redlock's own.
func oneLineStderr(t *testing.T, stderr string) {
	t.Helper()
	assert.True(t, strings.HasPrefix(stderr, "redlock: ") && strings.Count(stderr, "\n") == 1,
		"stderr = %q, want one line starting with \"redlock: \"", stderr)
}

func lockKey(name string) string { return "{redlock:" + name + "}" }

// TestRunExclusive: concurrent runs on one name never overlap, and their
// fencing tokens increase in the order they held the lock.
func TestRunExclusive(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	// The sleep widens the window an overlap would need; it synchronises
	// nothing.
	child := fmt.Sprintf(`echo "start $REDLOCK_TOKEN" >> %[1]s; sleep 0.1; echo "end $REDLOCK_TOKEN" >> %[1]s`, log)
	const runs = 4
	procs := make([]*proc, runs)
	for i := range procs {
		procs[i] = start(t, nil, "", "run", "--addr", srv.Addr(), "--wait", "50s", "excl", "--", "sh", "-c", child)
	}
	for _, p := range procs {
		require.Equal(t, 0, p.wait(t, longWait), "run exit code; stderr: %s", p.errText(t))
	}
	lines := strings.Split(strings.TrimSpace(readFile(t, log)), "\n")
	require.Len(t, lines, 2*runs, "log:\n%s", strings.Join(lines, "\n"))
	var last int64
	for i := 0; i < len(lines); i += 2 {
		s, e := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		require.Equal(t, "start", s[0], "line %d of\n%s", i, strings.Join(lines, "\n"))
		require.Equal(t, []string{"end", s[1]}, e, "the next line after a start must be its end:\n%s", strings.Join(lines, "\n"))
		tok, err := strconv.ParseInt(s[1], 10, 64)
		require.NoError(t, err)
		require.Greater(t, tok, last, "tokens must increase in the order of holding")
		last = tok
	}
}

// TestRunExitCodes: the child's code passes through, a signal death reads
// 128+N, and the lock is released whatever the child did.
func TestRunExitCodes(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	notExec := filepath.Join(t.TempDir(), "not-executable")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o600))
	for _, tc := range []struct {
		cmd  []string
		want int
	}{
		{[]string{"true"}, 0},
		{[]string{"sh", "-c", "exit 7"}, 7},
		{[]string{"sh", "-c", "kill -TERM $$"}, 128 + 15},
		{[]string{"sh", "-c", "kill -KILL $$"}, 128 + 9},
		{[]string{"/nonexistent/command"}, 127},
		{[]string{notExec}, 126},
	} {
		code, _, stderr := rl(t, nil, append([]string{"run", "--addr", srv.Addr(), "codes", "--"}, tc.cmd...)...)
		assert.Equal(t, tc.want, code, "run %v: exit code; stderr: %s", tc.cmd, stderr)
		assert.Empty(t, get(t, admin, lockKey("codes")), "lock key after run %v", tc.cmd)
	}
	// Without "--" the command starts at the first argument after NAME, and
	// its own flags stay its own.
	code, _, stderr := rl(t, nil, "run", "codes", "--addr", srv.Addr(), "sh", "-c", "exit 5")
	assert.Equal(t, 5, code, "run without --; stderr: %s", stderr)
}

func get(t *testing.T, cl *redis.Client, key string) string {
	t.Helper()
	v, err := cl.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	require.NoError(t, err)
	return v
}

// TestRunInherits: the child gets redlock's environment, stdin and stdout,
// and the REDLOCK_ variables; flags may follow NAME.
func TestRunInherits(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	child := fmt.Sprintf(`echo "$REDLOCK_NAME|$REDLOCK_OWNER|$REDLOCK_TOKEN|$FROM_PARENT" > %[1]s/env; cat > %[1]s/stdin; echo to-stdout`, dir)
	p := start(t, []string{"FROM_PARENT=yes"}, "piped input\n", "run", "inherit", "--addr", srv.Addr(), "--ttl", "5s", "--", "sh", "-c", child)
	require.Equal(t, 0, p.wait(t, longWait), "stderr: %s", p.errText(t))
	f := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "env"))), "|")
	require.Len(t, f, 4)
	assert.Equal(t, "inherit", f[0])
	assert.Len(t, f[1], 36, "REDLOCK_OWNER = %q, want a UUID", f[1])
	tok, err := strconv.ParseInt(f[2], 10, 64)
	require.NoError(t, err)
	assert.Positive(t, tok)
	assert.Equal(t, "yes", f[3])
	assert.Equal(t, "piped input\n", readFile(t, filepath.Join(dir, "stdin")))
	assert.Equal(t, "to-stdout\n", p.outText(t))
	assert.Empty(t, p.errText(t))
}

// TestRunNotObtained: --try on a held lock exits 75 at once, --wait exits
// 75 when it runs out; the command does not run.
func TestRunNotObtained(t *testing.T) {
	srv := redistest.Start(t)
	lk, err := redlock.NewLocker(srv.Client(t))
	require.NoError(t, err)
	defer lk.Close()
	l, err := lk.TryLock(context.Background(), "busy")
	require.NoError(t, err)
	defer l.Unlock(context.Background())

	ran := filepath.Join(t.TempDir(), "ran")
	for _, flags := range [][]string{{"--try"}, {"--wait", "300ms"}} {
		t0 := time.Now()
		code, _, stderr := rl(t, nil, append(append([]string{"run", "--addr", srv.Addr()}, flags...), "busy", "--", "touch", ran)...)
		assert.Equal(t, 75, code, "run %v on a held lock", flags)
		assert.Less(t, time.Since(t0), 15*time.Second, "run %v took too long", flags)
		oneLineStderr(t, stderr)
		assert.NoFileExists(t, ran)
	}

	// A signal while waiting ends the wait: 128+N, the command not run.
	p := start(t, nil, "", "run", "--addr", srv.Addr(), "busy", "--", "touch", ran)
	waitSubscribed(t, srv, "busy", p) // waiting means subscribed to the release channel
	admin := srv.Client(t)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 128+15, p.wait(t, longWait), "run interrupted while waiting")
	oneLineStderr(t, p.errText(t))
	assert.NoFileExists(t, ran)
	assert.Equal(t, l.Owner(), get(t, admin, lockKey("busy")), "the holder's key after the waiter gave up")
}

// TestRunLost: a server paused past the TTL makes the lock lost: the
// command's process group gets SIGTERM, SIGKILL after --grace if it stays,
// and redlock exits 76.
func TestRunLost(t *testing.T) {
	srv := redistest.Start(t)
	t.Run("SIGTERM", func(t *testing.T) {
		dir := t.TempDir()
		// Its shell's own notices ("Terminated") go elsewhere: stderr is
		// checked for redlock's line.
		child := fmt.Sprintf(`exec 2>/dev/null; trap 'echo TERM >> %[1]s/log; exit 0' TERM; echo ready >> %[1]s/log
i=0; while [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done`, dir)
		p := start(t, nil, "", "run", "--addr", srv.Addr(), "--ttl", "2s", "--grace", "30s", "lost-term", "--", "sh", "-c", child)
		waitFor(t, filepath.Join(dir, "log"), contains("ready"))
		srv.Pause(t)
		defer srv.Resume(t)
		assert.Equal(t, 76, p.wait(t, longWait))
		srv.Resume(t)
		assert.Contains(t, readFile(t, filepath.Join(dir, "log")), "TERM")
		oneLineStderr(t, p.errText(t))
		assert.Contains(t, p.errText(t), "lost")
	})
	t.Run("SIGKILL after grace", func(t *testing.T) {
		dir := t.TempDir()
		// Ignores SIGTERM, and so does its background child (ignored
		// signals are inherited): only SIGKILL to the group ends both.
		child := fmt.Sprintf(`trap '' TERM; sleep 600 & echo $! > %[1]s/bg; echo ready >> %[1]s/log; wait`, dir)
		p := start(t, nil, "", "run", "--addr", srv.Addr(), "--ttl", "2s", "--grace", "500ms", "lost-kill", "--", "sh", "-c", child)
		waitFor(t, filepath.Join(dir, "log"), contains("ready"))
		bg, err := strconv.Atoi(strings.TrimSpace(waitFor(t, filepath.Join(dir, "bg"), contains("\n"))))
		require.NoError(t, err)
		srv.Pause(t)
		defer srv.Resume(t)
		assert.Equal(t, 76, p.wait(t, longWait))
		srv.Resume(t)
		// SIGKILL was sent before redlock exited; the kernel may still be
		// tearing the process down.
		deadline := time.Now().Add(longWait)
		for !gone(bg) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		assert.True(t, gone(bg), "background process %d of the command still running %v after the group's SIGKILL", bg, longWait)
	})
}

// gone reports whether pid has exited (a zombie counts: it runs no more).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) != nil
	}
	// The state follows the command name, which is in parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}

// TestRunForwardsSignals: SIGINT, SIGTERM and SIGHUP reach the command;
// redlock exits with the command's own code and releases the lock after it.
func TestRunForwardsSignals(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	for i, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		dir := t.TempDir()
		code := 10 + i
		name := strings.TrimPrefix(strings.ToUpper(sig.String()), "SIG")
		child := fmt.Sprintf(`trap 'echo got >> %[1]s/log; exit %[2]d' %[3]s; echo ready >> %[1]s/log
i=0; while [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done`, dir, code, signalName(sig))
		p := start(t, nil, "", "run", "--addr", srv.Addr(), "fwd", "--", "sh", "-c", child)
		waitFor(t, filepath.Join(dir, "log"), contains("ready"))
		require.NoError(t, p.cmd.Process.Signal(sig))
		assert.Equal(t, code, p.wait(t, longWait), "exit code after %s; stderr: %s", name, p.errText(t))
		assert.Contains(t, readFile(t, filepath.Join(dir, "log")), "got", "the command's trap for %s", name)
		assert.Empty(t, get(t, admin, lockKey("fwd")), "lock key after the command exited on %s", name)
	}
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "INT"
	case syscall.SIGTERM:
		return "TERM"
	}
	return "HUP"
}

// TestStatus: free before, held during (owner and token as the command
// saw them), free after with the last token; --json; flags after NAME.
func TestStatus(t *testing.T) {
	srv := redistest.Start(t)
	code, out, _ := rl(t, nil, "status", "--addr", srv.Addr(), "st")
	assert.Equal(t, 1, code, "status of a free name")
	assert.Contains(t, out, "held: false\n")
	assert.Contains(t, out, "token: 0\n")

	dir := t.TempDir()
	p := start(t, nil, "", "run", "--addr", srv.Addr(), "st", "--", "sh", "-c", holdScript(dir))
	owner, token := holder(t, dir)

	code, out, stderr := rl(t, nil, "status", "st", "--addr", srv.Addr())
	assert.Equal(t, 0, code, "status of a held name; stderr: %s", stderr)
	assert.Contains(t, out, "held: true\n")
	assert.Contains(t, out, "owner: "+owner+"\n")
	assert.Contains(t, out, fmt.Sprintf("token: %d\n", token))
	assert.Regexp(t, `(?m)^ttl: \d+(\.\d+)?m?s$`, out)
	assert.Regexp(t, `(?m)^metadata: .+ pid \d+: sh$`, out, "the default metadata names host, pid and command")

	code, out, _ = rl(t, nil, "status", "st", "--json", "--addr", srv.Addr())
	assert.Equal(t, 0, code)
	assert.Contains(t, out, fmt.Sprintf(`"held":true,"owner":%q`, owner))
	assert.Contains(t, out, fmt.Sprintf(`"token":%d`, token))
	assert.Equal(t, 1, strings.Count(out, "\n"), "--json prints one line")

	touch(t, filepath.Join(dir, "go"))
	require.Equal(t, 0, p.wait(t, longWait))
	code, out, _ = rl(t, nil, "status", "--addr", srv.Addr(), "st")
	assert.Equal(t, 1, code, "status after the run")
	assert.Contains(t, out, "metadata: \n", "no metadata once free")
	assert.Contains(t, out, "held: false\n")
	assert.Contains(t, out, fmt.Sprintf("token: %d\n", token), "the last token stays")

	// A key set by hand, without expiry.
	require.NoError(t, srv.Client(t).Set(context.Background(), lockKey("by-hand"), "someone", 0).Err())
	code, out, _ = rl(t, nil, "status", "--addr", srv.Addr(), "by-hand")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "owner: someone\nttl: none\nttl_ms: -1\n")
}

// TestUnlock: an operator releases a lock by its owner value; the running
// redlock then finds its lock lost and terminates its command.
func TestUnlock(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	p := start(t, nil, "", "run", "--addr", srv.Addr(), "--ttl", "3s", "ul", "--", "sh", "-c", holdScript(dir))
	owner, _ := holder(t, dir)

	code, out, stderr := rl(t, nil, "unlock", "ul", "--owner", "someone-else", "--addr", srv.Addr())
	assert.Equal(t, 1, code, "unlock with the wrong owner")
	assert.Empty(t, out, "unlock with the wrong owner")
	oneLineStderr(t, stderr)
	// Where to find the right owner (issue 39, item 4).
	assert.Contains(t, stderr, "not held by owner someone-else (run 'redlock status ul' with the same flags")
	code, _, _ = rl(t, nil, "status", "ul", "--addr", srv.Addr())
	assert.Equal(t, 0, code, "status after a wrong-owner unlock")

	// It says what it released (issue 39, item 4: it said nothing).
	code, out, stderr = rl(t, nil, "unlock", "ul", "--owner", owner, "--addr", srv.Addr())
	assert.Equal(t, 0, code, "unlock by the owner; stderr: %s", stderr)
	assert.Regexp(t, `^released ul \(owner `+owner+`, token \d+, metadata ".+ pid \d+: sh"\)\n$`, out, "unlock by the owner")
	assert.Empty(t, stderr, "unlock by the owner")
	code, _, _ = rl(t, nil, "status", "ul", "--addr", srv.Addr())
	assert.Equal(t, 1, code, "status after unlock")
	code, _, _ = rl(t, nil, "unlock", "ul", "--owner", owner, "--addr", srv.Addr())
	assert.Equal(t, 1, code, "second unlock by the same owner")

	assert.Equal(t, 76, p.wait(t, longWait), "run whose lock an operator released")
}

// TestUsage: bad flags and arguments exit 2 with one line and a hint on
// stderr; help and version exit 0 on stdout.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"run", "--bogus", "n", "--", "true"},
		{"run", "--addr", "127.0.0.1:1"},
		{"run", "n"},
		{"run", "--try", "--wait", "1s", "n", "--", "true"},
		{"run", "--ttl", "-1s", "n", "--", "true"},
		{"run", "--wait", "soon", "n", "--", "true"},
		{"status"},
		{"status", "a", "b"},
		{"status", "--addr", "127.0.0.1:1", "--redlock", "127.0.0.1:2", "n"},
		{"unlock", "n"},
		{"unlock", "--owner"},
	} {
		code, out, stderr := rl(t, nil, args...)
		assert.Equal(t, 2, code, "redlock %q: exit code", args)
		usageLine(t, stderr, args)
		assert.Empty(t, out, "redlock %q: stdout", args)
	}
	for _, args := range [][]string{{"--help"}, {"help"}, {"run", "--help"}, {"status", "-h"}, {"help", "unlock"}} {
		code, out, stderr := rl(t, nil, args...)
		assert.Equal(t, 0, code, "redlock %q", args)
		assert.Contains(t, out, "Usage", "redlock %q: stdout", args)
		assert.Empty(t, stderr, "redlock %q: stderr", args)
	}
	_, out, _ := rl(t, nil, "--help")
	assert.Contains(t, out, "Examples:")
	assert.Contains(t, out, "Exit codes:")
	code, out, _ := rl(t, nil, "version")
	assert.Equal(t, 0, code)
	assert.True(t, strings.HasPrefix(out, "redlock "), "version = %q", out)
}

// TestNameBeforeDashDash: for run, "--" starts COMMAND, so a NAME missing
// before it is a usage error and nothing runs, however the flags are placed
// (issue 20, item 8: "run -- /bin/sh -c X" ran "-c" under a lock on
// "/bin/sh"). status and unlock take no COMMAND: after "--" comes NAME.
func TestNameBeforeDashDash(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	dir := t.TempDir()
	for i, tc := range []struct {
		args []string // "RAN" is replaced by a file the command would create
		want int
	}{
		{[]string{"run", "--addr", addr, "--", "/bin/sh", "-c", "touch RAN"}, exitUsage},
		{[]string{"run", "--", "--addr", addr, "/bin/sh", "-c", "touch RAN"}, exitUsage},
		{[]string{"run", "--addr", addr, "--", "n", "touch", "RAN"}, exitUsage},
		{[]string{"run", "--addr", addr, "--try", "--", "touch", "RAN"}, exitUsage},
		{[]string{"run", "--addr", addr, "--ttl", "1s", "--", "touch", "RAN"}, exitUsage},
		{[]string{"run", "--addr=" + addr, "--wait=1s", "--", "n", "--", "touch", "RAN"}, exitUsage},
		{[]string{"run", "--addr", addr, "--"}, exitUsage},
		{[]string{"run", "--addr", addr, "n", "--", "touch", "RAN"}, exitOK},
		{[]string{"run", "--addr", addr, "n", "touch", "RAN"}, exitOK},
		{[]string{"run", "n", "--addr", addr, "--", "touch", "RAN"}, exitOK},
		{[]string{"status", "--addr", addr, "--"}, exitUsage},
		{[]string{"status", "--addr", addr, "--", "n"}, exitFree},
		{[]string{"status", "--addr", addr, "--", "--json"}, exitFree}, // a lock named "--json"
		{[]string{"status", "--addr", addr, "--", "n", "m"}, exitUsage},
		{[]string{"unlock", "--addr", addr, "--owner", "o", "--"}, exitUsage},
		{[]string{"unlock", "--addr", addr, "--", "n", "--owner", "o"}, exitUsage},
		{[]string{"unlock", "--addr", addr, "--owner", "o", "--", "n"}, exitFree},
	} {
		ran := filepath.Join(dir, fmt.Sprintf("ran-%d", i))
		args := make([]string, len(tc.args))
		for j, a := range tc.args {
			args[j] = strings.ReplaceAll(a, "RAN", ran)
		}
		code, _, stderr := rl(t, nil, args...)
		assert.Equal(t, tc.want, code, "redlock %q: exit code; stderr: %s", tc.args, stderr)
		if tc.want == exitUsage {
			usageLine(t, stderr, tc.args)
			assert.NoFileExists(t, ran, "redlock %q ran a command", tc.args)
		}
		if tc.want == exitOK {
			assert.FileExists(t, ran, "redlock %q did not run its command", tc.args)
		}
	}
}

// TestUnreachable: a Redis that refuses or does not answer is an error
// within --timeout, with a code that claims neither "held" nor "free", and
// one line of redlock's own on stderr (nothing from go-redis).
func TestUnreachable(t *testing.T) {
	closed := closedAddr(t)
	for _, args := range [][]string{
		{"status", "--addr", closed, "--timeout", "1s", "n"},
		{"unlock", "--addr", closed, "--timeout", "1s", "n", "--owner", "o"},
		{"run", "--addr", closed, "--timeout", "1s", "n", "--", "true"},
	} {
		t0 := time.Now()
		code, out, stderr := rl(t, nil, args...)
		assert.Equal(t, 69, code, "redlock %q", args)
		assert.Less(t, time.Since(t0), 20*time.Second, "redlock %q", args)
		assert.Empty(t, out)
		oneLineStderr(t, stderr)
	}

	srv := redistest.Start(t)
	// --addr beats REDIS_URL; REDIS_URL is used without --addr.
	code, _, stderr := rl(t, []string{"REDIS_URL=redis://" + closed}, "status", "--addr", srv.Addr(), "n")
	assert.Equal(t, 1, code, "status with --addr and a dead REDIS_URL; stderr: %s", stderr)
	code, _, stderr = rl(t, []string{"REDIS_URL=redis://" + srv.Addr() + "/0"}, "status", "n")
	assert.Equal(t, 1, code, "status with REDIS_URL; stderr: %s", stderr)

	// A server that stops answering: status, and a run waiting for a
	// held lock, give up within about --timeout.
	lk, err := redlock.NewLocker(srv.Client(t), redlock.WithAutoRenew(false), redlock.WithTTL(time.Minute))
	require.NoError(t, err)
	defer lk.Close()
	_, err = lk.TryLock(context.Background(), "paused")
	require.NoError(t, err)
	p := start(t, nil, "", "run", "--addr", srv.Addr(), "--timeout", "1s", "paused", "--", "true")
	srv.Pause(t)
	defer srv.Resume(t)
	code, _, stderr = rl(t, nil, "status", "--addr", srv.Addr(), "--timeout", "1s", "paused")
	assert.Equal(t, 69, code, "status against a paused server")
	oneLineStderr(t, stderr)
	assert.Equal(t, 69, p.wait(t, longWait), "run waiting on a paused server; stderr: %s", p.errText(t))
	oneLineStderr(t, p.errText(t))
	srv.Resume(t)
}

// TestRedlockMode: --redlock runs over a quorum of independent masters;
// status reports the holder a quorum agrees on, also with one master paused.
func TestRedlockMode(t *testing.T) {
	srvs := redistest.StartN(t, 3)
	var urls []string
	for _, s := range srvs {
		urls = append(urls, "redis://"+s.Addr())
	}
	quorum := strings.Join(urls, ",")
	dir := t.TempDir()
	p := start(t, nil, "", "run", "--redlock", quorum, "rl", "--", "sh", "-c", holdScript(dir))
	owner, token := holder(t, dir)

	srvs[2].Pause(t)
	defer srvs[2].Resume(t)
	code, out, stderr := rl(t, nil, "status", "--redlock", quorum, "--timeout", "2s", "rl")
	assert.Equal(t, 0, code, "status with a paused minority; stderr: %s", stderr)
	assert.Contains(t, out, "owner: "+owner+"\n")
	assert.Contains(t, out, fmt.Sprintf("token: %d\n", token))
	srvs[2].Resume(t)

	touch(t, filepath.Join(dir, "go"))
	require.Equal(t, 0, p.wait(t, longWait), "stderr: %s", p.errText(t))
	for i, s := range srvs {
		assert.Empty(t, get(t, s.Client(t), lockKey("rl")), "lock key on master %d after the run", i)
	}
	code, _, _ = rl(t, nil, "status", "--redlock", quorum, "rl")
	assert.Equal(t, 1, code)
}
