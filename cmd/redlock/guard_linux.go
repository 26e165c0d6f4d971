package main

import (
	"runtime"
	"syscall"
)

// selfExe is the binary to run the guard from: /proc/self/exe is this very
// binary even if a package upgrade has replaced the file meanwhile.
func selfExe() (string, error) { return "/proc/self/exe", nil }

// commandAttr has the kernel SIGKILL the command's first process if its
// guard dies: the guard is then killed itself, and the lifeline cannot
// fire. redlock, if alive, kills the rest of the group (guardKilled).
func commandAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// lockThread keeps the calling goroutine on its OS thread for good:
// Pdeathsig fires when the thread that forked exits, and the Go runtime
// ends a thread only when a goroutine locked to it returns.
func lockThread() { runtime.LockOSThread() }
