//go:build unix

package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// familyScript is a command that starts a grandchild, records both pids in
// dir/pid and dir/bg, and runs until killed (at most 60s; the grandchild at
// most 600s, and the test kills both if they outlive it).
func familyScript(dir string) string {
	return fmt.Sprintf(`sleep 600 & echo $! > %[1]s/bg.tmp && mv %[1]s/bg.tmp %[1]s/bg
echo $$ > %[1]s/pid.tmp && mv %[1]s/pid.tmp %[1]s/pid
i=0; while [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done`, dir)
}

// family returns the pids familyScript recorded, once it has, and kills
// them at the end of the test if they are still running.
func family(t *testing.T, dir string) (cmd, grandchild int) {
	t.Helper()
	pid := func(name string) int {
		t.Helper()
		n, err := strconv.Atoi(strings.TrimSpace(waitFor(t, filepath.Join(dir, name), contains("\n"))))
		require.NoError(t, err)
		return n
	}
	cmd, grandchild = pid("pid"), pid("bg")
	t.Cleanup(func() {
		for _, p := range []int{cmd, grandchild} {
			if !gone(p) {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
	})
	return cmd, grandchild
}

// TestRunRedlockKilled: a redlock killed by SIGKILL takes its command's
// process group with it, grandchildren included, before the lease ends;
// the next holder's command runs alone (issue 20, item 3: the command ran
// on unguarded, alongside the next holder's).
func TestRunRedlockKilled(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	const ttl = 3 * time.Second
	dir := t.TempDir()
	p := start(t, nil, "", "run", "--addr", srv.Addr(), "--ttl", ttl.String(), "killed", "--", "sh", "-c", familyScript(dir))
	cmdPid, bg := family(t, dir)
	owner := get(t, admin, lockKey("killed"))
	require.NotEmpty(t, owner, "lock key while the command runs")

	require.NoError(t, p.cmd.Process.Kill())
	killed := time.Now()
	p.wait(t, longWait)
	// Polled on the real conditions: both processes dead, while the key
	// of the killed redlock, whose expiry lets the next holder in, stands.
	deadline := time.Now().Add(longWait)
	for {
		dead := gone(cmdPid) && gone(bg)
		pttl, err := admin.PTTL(t.Context(), lockKey("killed")).Result()
		require.NoError(t, err)
		held := get(t, admin, lockKey("killed")) == owner
		if dead {
			require.True(t, held, "command and grandchild gone only after the lease ended")
			t.Logf("command and grandchild gone %v after redlock's SIGKILL, %v of the lease left", time.Since(killed), pttl)
			break
		}
		require.True(t, held, "the lease ended %v after redlock's SIGKILL, with its command (pid %d, gone: %t) and grandchild (pid %d, gone: %t) still running",
			time.Since(killed), cmdPid, gone(cmdPid), bg, gone(bg))
		require.True(t, time.Now().Before(deadline), "still running after %v", longWait)
		time.Sleep(5 * time.Millisecond)
	}

	// Once the lease is over, a second run gets the lock and its command
	// runs alone.
	for deadline := time.Now().Add(longWait); get(t, admin, lockKey("killed")) != ""; {
		require.True(t, time.Now().Before(deadline), "lease of the killed redlock not over after %v", longWait)
		time.Sleep(10 * time.Millisecond)
	}
	dir2 := t.TempDir()
	p2 := start(t, nil, "", "run", "--addr", srv.Addr(), "--ttl", ttl.String(), "--try", "killed", "--", "sh", "-c", holdScript(dir2))
	holder(t, dir2)
	assert.True(t, gone(cmdPid) && gone(bg), "the second run's command runs alongside the first's")
	touch(t, filepath.Join(dir2, "go"))
	assert.Equal(t, 0, p2.wait(t, longWait), "second run --try; stderr: %s", p2.errText(t))
}
