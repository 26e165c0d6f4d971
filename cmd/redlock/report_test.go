//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock"
	"github.com/redlockgo/redlock/internal/redistest"
)

// errorLine checks that stderr is one line "redlock: OP: CAUSE" that says
// each of want once, and none of the library's wrapping again.
func errorLine(t *testing.T, stderr, op string, want ...string) {
	t.Helper()
	oneLineStderr(t, stderr)
	assert.True(t, strings.HasPrefix(stderr, "redlock: "+op+": "), "stderr = %q, want it to start with %q", stderr, "redlock: "+op+": ")
	assert.Equal(t, 1, strings.Count(stderr, "redlock:"), "stderr = %q, want \"redlock:\" once", stderr)
	for _, w := range want {
		assert.Equal(t, 1, strings.Count(stderr, w), "stderr = %q, want %q once", stderr, w)
	}
}

// replicaWait bounds a run against a replica: it must return at once, so a
// hang fails the test well before longWait.
const replicaWait = 15 * time.Second

// TestRunReplica: run on a replica exits 69 at once, with the READONLY
// refusal for its cause, with or without --wait; it never claims another
// owner holds the lock (issue "first hour", item 1: it hung, and with
// --wait said "held by another owner").
func TestRunReplica(t *testing.T) {
	pair := redistest.StartPair(t)
	ran := filepath.Join(t.TempDir(), "ran")
	for _, flags := range [][]string{{"--try"}, {"--wait", "3s"}, nil} {
		args := append(append([]string{"run", "--addr", pair.Replica.Addr()}, flags...), "job", "--", "touch", ran)
		t0 := time.Now()
		p := start(t, nil, "", args...)
		code := p.wait(t, replicaWait)
		stderr := p.errText(t)
		assert.Equal(t, exitUnavailable, code, "run %v on a replica: exit code; stderr: %s", flags, stderr)
		assert.Less(t, time.Since(t0), replicaWait, "run %v on a replica", flags)
		errorLine(t, stderr, "run job", pair.Replica.Addr(), "READONLY")
		assert.NotContains(t, stderr, "another owner", "run %v on a replica", flags)
		assert.NoFileExists(t, ran, "run %v on a replica ran its command", flags)
	}
	// The master, free, is not the replica's fault: run works there.
	code, _, stderr := rl(t, nil, "run", "--addr", pair.Master.Addr(), "job", "--", "touch", ran)
	assert.Equal(t, exitOK, code, "run on the master; stderr: %s", stderr)
}

// TestRunHeldSaysOwner: "held by another owner" is said when another owner
// holds the lock, with who and for how long, and exit 75.
func TestRunHeldSaysOwner(t *testing.T) {
	srv := redistest.Start(t)
	lk, err := redlock.NewLocker(srv.Client(t))
	require.NoError(t, err)
	defer lk.Close()
	l, err := lk.TryLock(context.Background(), "held")
	require.NoError(t, err)
	defer l.Unlock(context.Background())

	code, _, stderr := rl(t, nil, "run", "--addr", srv.Addr(), "--try", "held", "--", "true")
	assert.Equal(t, exitNotObtained, code)
	errorLine(t, stderr, "run held", "not obtained: held by another owner", l.Owner())
	code, _, stderr = rl(t, nil, "run", "--addr", srv.Addr(), "--wait", "200ms", "held", "--", "true")
	assert.Equal(t, exitNotObtained, code)
	errorLine(t, stderr, "run held", "not obtained within --wait 200ms: held by another owner", l.Owner())
}

// TestAuthRefused: a wrong or missing password is Redis refusing (exit 69,
// its WRONGPASS or NOAUTH on one line), not Redis out of reach; so is an
// ACL user barred from the lock's key (NOPERM) (issue "first hour", item
// 5).
func TestAuthRefused(t *testing.T) {
	srv := redistest.Start(t)
	srv.ACLUser(t, "app", "right", "~*", "&*", "+@all")
	srv.ACLUser(t, "narrow", "pw", "~other:*", "&*", "+@all")
	wrong := "redis://app:wrong@" + srv.Addr()
	narrow := "redis://narrow:pw@" + srv.Addr()
	for _, tc := range []struct {
		args       []string
		op, refuse string
	}{
		{[]string{"run", "--addr", wrong, "n", "--", "true"}, "run n", "refused authentication: WRONGPASS"},
		{[]string{"status", "--addr", wrong, "n"}, "status n", "refused authentication: WRONGPASS"},
		{[]string{"unlock", "--addr", wrong, "n", "--owner", "o"}, "unlock n", "refused authentication: WRONGPASS"},
		{[]string{"run", "--addr", narrow, "--try", "n", "--", "true"}, "run n", "refused permission: NOPERM"},
		{[]string{"status", "--addr", narrow, "n"}, "status n", "refused permission: NOPERM"},
	} {
		code, out, stderr := rl(t, nil, tc.args...)
		assert.Equal(t, exitUnavailable, code, "redlock %q; stderr: %s", tc.args, stderr)
		assert.Empty(t, out, "redlock %q: stdout", tc.args)
		errorLine(t, stderr, tc.op, srv.Addr(), tc.refuse)
		assert.NotContains(t, stderr, "reach", "redlock %q", tc.args)
	}
	// With a password on the default user, no password at all is NOAUTH.
	srv.Do(t, "CONFIG", "SET", "requirepass", "pw")
	code, _, stderr := rl(t, nil, "status", "--addr", srv.Addr(), "n")
	assert.Equal(t, exitUnavailable, code)
	errorLine(t, stderr, "status n", srv.Addr(), "refused authentication: NOAUTH")
}

// TestUnreachableCause: a Redis that refuses connections or stops
// answering is reported with the address and the cause, once, for every
// command; run exits 69 within about --timeout, whether it was connecting
// or already waiting.
func TestUnreachableCause(t *testing.T) {
	closed := closedAddr(t)
	for _, tc := range []struct {
		args []string
		op   string
	}{
		{[]string{"run", "--addr", closed, "--timeout", "1s", "n", "--", "true"}, "run n"},
		{[]string{"run", "--addr", closed, "--timeout", "1s", "--wait", "1m", "n", "--", "true"}, "run n"},
		{[]string{"status", "--addr", closed, "n"}, "status n"},
		{[]string{"unlock", "--addr", closed, "n", "--owner", "o"}, "unlock n"},
	} {
		code, _, stderr := rl(t, nil, tc.args...)
		assert.Equal(t, exitUnavailable, code, "redlock %q", tc.args)
		errorLine(t, stderr, tc.op, closed+" cannot be reached: connection refused")
	}

	// Two of three masters refuse: both named, the cause said once.
	srv := redistest.Start(t)
	closed2 := closedAddr(t)
	code, _, stderr := rl(t, nil, "status", "--redlock", strings.Join([]string{closed, srv.Addr(), closed2}, ","), "n")
	assert.Equal(t, exitUnavailable, code)
	errorLine(t, stderr, "status n", closed, closed2, "cannot be reached: connection refused")

	// A server that stops answering while run waits for it.
	lk, err := redlock.NewLocker(srv.Client(t), redlock.WithAutoRenew(false), redlock.WithTTL(time.Minute))
	require.NoError(t, err)
	defer lk.Close()
	_, err = lk.TryLock(context.Background(), "paused")
	require.NoError(t, err)
	p := start(t, nil, "", "run", "--addr", srv.Addr(), "--timeout", "1s", "paused", "--", "true")
	waitSubscribed(t, srv, "paused", p)
	srv.Pause(t)
	defer srv.Resume(t)
	assert.Equal(t, exitUnavailable, p.wait(t, longWait), "run waiting on a paused server")
	errorLine(t, p.errText(t), "run paused", srv.Addr()+" did not answer in time")
	srv.Resume(t)
}

// waitSubscribed waits until p waits for the lock name on srv: subscribed
// to its release channel.
func waitSubscribed(t *testing.T, srv *redistest.Server, name string, p *proc) {
	t.Helper()
	admin := srv.Client(t)
	deadline := time.Now().Add(longWait)
	for {
		chans, err := admin.PubSubChannels(context.Background(), lockKey(name)+":rel").Result()
		require.NoError(t, err)
		if len(chans) > 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "run did not start waiting within %v; stderr: %s", longWait, p.errText(t))
		time.Sleep(10 * time.Millisecond)
	}
}

// TestErrorLines: what run prints when its command cannot start, or its
// lock is lost under it, is one line naming the lock and the cause once.
func TestErrorLines(t *testing.T) {
	srv := redistest.Start(t)
	notExec := filepath.Join(t.TempDir(), "not-executable")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o600))
	for _, tc := range []struct {
		cmd  string
		code int
		want string
	}{
		{"/nonexistent/command", exitNotFound, "cannot start /nonexistent/command: no such file or directory"},
		{"no-such-command-anywhere", exitNotFound, "cannot start no-such-command-anywhere: executable file not found"},
		{notExec, exitCannotRun, "cannot start " + notExec + ": permission denied"},
	} {
		code, _, stderr := rl(t, nil, "run", "--addr", srv.Addr(), "start", "--", tc.cmd)
		assert.Equal(t, tc.code, code, "run %s", tc.cmd)
		errorLine(t, stderr, "run start", tc.want)
	}

	// An operator's unlock: the lock is lost, its key gone.
	dir := t.TempDir()
	p := start(t, nil, "", "run", "--addr", srv.Addr(), "--grace", "30s", "lost", "--", "sh", "-c", holdScript(dir))
	owner, _ := holder(t, dir)
	code, _, stderr := rl(t, nil, "unlock", "lost", "--owner", owner, "--addr", srv.Addr())
	require.Equal(t, exitOK, code, "unlock; stderr: %s", stderr)
	assert.Equal(t, exitLost, p.wait(t, longWait))
	errorLine(t, p.errText(t), "run lost", "lock lost (its key was deleted or expired on the server)")

	code, _, stderr = rl(t, nil, "unlock", "lost", "--owner", owner, "--addr", srv.Addr())
	assert.Equal(t, exitFree, code)
	errorLine(t, stderr, "unlock lost", "not held by owner "+owner)

	// The command's last act frees the lock: the tracking connection hears
	// it at once, so the lock is lost as sh exits (or, should sh's exit be
	// seen first, its release finds the lock gone).
	child := fmt.Sprintf(`%s unlock --addr %s gone --owner "$REDLOCK_OWNER"`, bin, srv.Addr())
	code, _, stderr = rl(t, nil, "run", "--addr", srv.Addr(), "gone", "--", "sh", "-c", child)
	assert.Equal(t, exitLost, code)
	errorLine(t, stderr, "run gone")
	assert.True(t, strings.Contains(stderr, "sh exited") != strings.Contains(stderr, "lock lost"),
		"stderr = %q, want \"sh exited\" or \"lock lost\"", stderr)
	assert.NotContains(t, stderr, `"gone"`, "the lock named again")
	assert.LessOrEqual(t, strings.Count(stderr, "not held"), 1, "stderr = %q", stderr)
}

// redisErr is a Redis error reply, as go-redis types them.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

// TestExplain: the cause and exit code read from an error as the library
// returns it, node by node.
func TestExplain(t *testing.T) {
	tg := &target{addrs: []string{"a:1", "b:2", "c:3"}}
	node := func(i int, err error) error { return &redlock.NodeError{Node: i, Addr: "Redis<x>", Err: err} }
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		err  error
		code int
		why  string
	}{
		{errors.Join(redlock.ErrNotObtained, &redlock.TakenError{Name: "n", Owner: "o1", TTL: 1500 * time.Millisecond}),
			exitNotObtained, "held by another owner (owner o1, 1.5s left)"},
		{errors.Join(redlock.ErrNotObtained, node(0, redisErr("READONLY You can't write against a read only replica. script: 1234, on @user_script:54."))),
			exitUnavailable, "a:1 refused the write: READONLY You can't write against a read only replica (--redlock must name a master)"},
		{errors.Join(redlock.ErrNotObtained, node(1, redisErr("WRONGPASS invalid username-password pair or user is disabled."))),
			exitUnavailable, "b:2 refused authentication: WRONGPASS invalid username-password pair or user is disabled"},
		{errors.Join(node(0, refused), node(2, refused), node(1, context.DeadlineExceeded)),
			exitUnavailable, "a:1, c:3 cannot be reached: connection refused; b:2 did not answer in time"},
		{errors.Join(redlock.ErrNotObtained, context.DeadlineExceeded), 0, "lock not obtained; context deadline exceeded"},
		{fmt.Errorf("x: %w", redisErr("OOM command not allowed")), exitUnavailable, "refused: OOM command not allowed"},
	} {
		code, why := tg.explain(tc.err)
		assert.Equal(t, tc.code, code, "explain(%q)", tc.err)
		assert.Equal(t, tc.why, why, "explain(%q)", tc.err)
	}
	// With one server, an error that names none is that server's. (The
	// fake reply is not wrapped: go-redis's classifiers see through
	// wrapping only for its own error types.)
	one := &target{addrs: []string{"a:1"}}
	_, why := one.explain(redisErr("READONLY You can't write against a read only replica."))
	assert.Equal(t, "a:1 refused the write: READONLY You can't write against a read only replica (--addr must name a master)", why)
}
