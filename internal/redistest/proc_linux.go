package redistest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sysProcAttr puts redis-server in its own process group, so that stop can
// kill it together with anything it forked, and has the kernel kill it if
// the test binary dies without running cleanups (a -timeout panic, a
// SIGKILL from the user), so that no server outlives its test.
//
// Pdeathsig fires when the OS thread that started the process exits. The
// Go runtime only ends a thread when a goroutine locked to it with
// runtime.LockOSThread returns, which test goroutines do not do.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// waitStopped polls /proc until process pid is in the stopped state, or
// timeout expires. kill(2) only queues SIGSTOP; the target stops when it
// next runs.
func waitStopped(pid int, timeout time.Duration) error {
	var state string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); {
		var err error
		if state, err = procState(pid); err != nil {
			return err
		}
		switch state {
		case "T":
			return nil
		case "Z", "X":
			return fmt.Errorf("pid %d exited instead of stopping", pid)
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("pid %d not stopped within %v of SIGSTOP (state %q)", pid, timeout, state)
}

// procState returns the state letter of process pid from /proc/PID/stat.
func procState(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	// The format is "pid (comm) state ...", and comm may itself contain
	// spaces and parentheses, so parse from the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	fields := strings.Fields(s[i+1:])
	if i < 0 || len(fields) == 0 {
		return "", fmt.Errorf("unexpected /proc/%d/stat: %q", pid, s)
	}
	return fields[0], nil
}
