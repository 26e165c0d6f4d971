//go:build !unix

package main

import (
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Without process groups (Windows, Plan 9) signals go to the command's
// first process only, and a lost lock kills it at once. There is no guard:
// a redlock killed outright leaves its command running. (On Windows a job
// object with JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE would do the guard's work.)

const guardArg = "__guard"

// startCommand starts command with env as its environment.
func startCommand(command, env []string, _ bool) (*exec.Cmd, io.Closer, error) {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return cmd, io.NopCloser(nil), nil
}

func guardKilled(*os.ProcessState) bool { return false }

func guardCmd(_ []string, stderr io.Writer) int {
	return fail(stderr, exitUsage, "unknown command %q", guardArg)
}

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
