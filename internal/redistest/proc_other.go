//go:build unix && !linux

package redistest

import (
	"syscall"
	"time"
)

// sysProcAttr puts redis-server in its own process group, so that stop can
// kill it together with anything it forked. Unlike on Linux there is no
// portable way to have the server killed when the test binary dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// waitStopped returns at once: without /proc there is no cheap portable
// way to observe the stopped state, and SIGSTOP is in practice delivered
// before a client can get a request to the server.
func waitStopped(int, time.Duration) error { return nil }
