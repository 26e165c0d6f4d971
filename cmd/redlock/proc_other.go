//go:build !unix

package main

import (
	"os"
	"syscall"
	"time"
)

// Without process groups (Windows, Plan 9) signals go to the command's
// first process only, and a lost lock kills it at once.

var forwarded = []os.Signal{os.Interrupt}

func groupAttr(bool) *syscall.SysProcAttr { return nil }

func signalGroup(pid int, s os.Signal) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Signal(s)
	}
}

func terminateGroup(pid int) { killGroup(pid) }

func killGroup(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}

func groupAlive(int, time.Time) bool { return false }

func exitStatus(ps *os.ProcessState) int { return ps.ExitCode() }

func (s signalled) number() int { return 2 }
