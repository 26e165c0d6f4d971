//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"os/signal"
	"syscall"
	"unsafe"
)

// inForeground reports whether redlock is the foreground job of the
// terminal on its stdin. The command, in a process group of its own, must
// then be given the terminal: reading it from a background group would stop
// it with SIGTTIN, and redlock would wait for it forever.
func inForeground() bool {
	var pgrp int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, 0, uintptr(syscall.TIOCGPGRP), uintptr(unsafe.Pointer(&pgrp))); errno != 0 {
		return false // not a terminal
	}
	return int(pgrp) == syscall.Getpgrp()
}

// reclaimTerminal makes redlock's process group the terminal's foreground
// again once the command has exited, so that its last message, and the
// shell after it, find the terminal where they left it. Setting it from a
// background group raises SIGTTOU, ignored meanwhile.
func reclaimTerminal() {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	pgrp := int32(syscall.Getpgrp())
	_, _, _ = syscall.Syscall(syscall.SYS_IOCTL, 0, uintptr(syscall.TIOCSPGRP), uintptr(unsafe.Pointer(&pgrp)))
}
