package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// procStat is a process's state, parent and process group from /proc.
func procStat(t *testing.T, pid int) (state string, ppid, pgid int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	// The fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	require.GreaterOrEqual(t, len(f), 3, "/proc/%d/stat: %q", pid, b)
	ppid, err = strconv.Atoi(f[1])
	require.NoError(t, err)
	pgid, err = strconv.Atoi(f[2])
	require.NoError(t, err)
	return f[0], ppid, pgid
}

// poll waits for cond, at most longWait.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(longWait); !cond(); {
		require.True(t, time.Now().Before(deadline), "%s: not after %v", what, longWait)
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRunGuardKilled: the guard leading the command's process group is a
// child of redlock. Killed by itself, it takes the command's first process
// with it (its parent-death signal, even while redlock cannot act), and
// redlock kills the rest of the group before it releases the lock.
func TestRunGuardKilled(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	dir := t.TempDir()
	p := start(t, nil, "", "run", "--addr", srv.Addr(), "guard-killed", "--", "sh", "-c", familyScript(dir))
	cmdPid, bg := family(t, dir)
	_, cmdParent, pgid := procStat(t, cmdPid)
	_, guardParent, guardGroup := procStat(t, pgid)
	require.NotEqual(t, cmdPid, pgid, "the command leads its own process group: no guard")
	require.Equal(t, pgid, cmdParent, "the command's parent is the leader of its group, the guard")
	require.Equal(t, p.cmd.Process.Pid, guardParent, "the guard's parent is redlock")
	require.Equal(t, pgid, guardGroup)
	_, _, bgGroup := procStat(t, bg)
	require.Equal(t, pgid, bgGroup, "the grandchild is in the command's group")

	// redlock stopped, only the kernel can act when the guard dies. (If
	// the test fails meanwhile, start's cleanup SIGKILLs redlock.)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGSTOP))
	poll(t, "redlock stopped", func() bool { s, _, _ := procStat(t, p.cmd.Process.Pid); return s == "T" })
	require.NoError(t, syscall.Kill(pgid, syscall.SIGKILL))
	poll(t, "the command's first process gone after its guard was killed", func() bool { return gone(cmdPid) })
	assert.False(t, gone(bg), "the grandchild: the parent-death signal reaches the first process only")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGCONT))
	assert.Equal(t, 128+9, p.wait(t, longWait), "redlock's exit code; stderr: %s", p.errText(t))
	assert.True(t, gone(bg), "the grandchild once redlock has exited")
	assert.Empty(t, get(t, admin, lockKey("guard-killed")), "lock key after redlock exited")
	oneLineStderr(t, p.errText(t))
	assert.Contains(t, p.errText(t), "guard")
}
