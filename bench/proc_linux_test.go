//go:build linux

package bench

import "syscall"

// sysProcAttr kills redis-server when the benchmark binary dies, so that an
// interrupted run leaves no server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
