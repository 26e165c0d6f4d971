//go:build unix

package main

import (
	"os"
	"syscall"
	"time"
)

// forwarded are the signals redlock passes on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// groupAttr starts the command as the leader of its own process group;
// with foreground, that group also becomes the foreground of the terminal
// on stdin (fd 0 in the child too).
func groupAttr(foreground bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Foreground: foreground, Ctty: 0}
}

// signalGroup sends s to the command's process group, as a terminal does,
// so that a pipeline or a shell's foreground child sees it too.
func signalGroup(pgid int, s os.Signal) {
	if sig, ok := s.(syscall.Signal); ok {
		_ = syscall.Kill(-pgid, sig) // ESRCH: the group has exited meanwhile
	}
}

func terminateGroup(pgid int) { _ = syscall.Kill(-pgid, syscall.SIGTERM) }

func killGroup(pgid int) { _ = syscall.Kill(-pgid, syscall.SIGKILL) }

// groupAlive polls until the process group pgid is empty, and reports
// whether it still had members at deadline.
func groupAlive(pgid int, deadline time.Time) bool {
	for {
		if err := syscall.Kill(-pgid, 0); err != nil {
			return false // ESRCH: nobody left
		}
		if !time.Now().Before(deadline) {
			return true
		}
		time.Sleep(min(20*time.Millisecond, time.Until(deadline)))
	}
}

// exitStatus is the command's exit code, or 128+N if signal N killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	return ps.ExitCode()
}

func (s signalled) number() int {
	if sig, ok := s.s.(syscall.Signal); ok {
		return int(sig)
	}
	return 0
}
