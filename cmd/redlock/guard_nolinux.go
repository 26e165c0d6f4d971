//go:build unix && !linux

package main

import (
	"os"
	"syscall"
)

// selfExe is the binary to run the guard from.
func selfExe() (string, error) { return os.Executable() }

// commandAttr is empty: no parent-death signal outside Linux. A guard
// killed on its own leaves its command to redlock (guardKilled).
func commandAttr() *syscall.SysProcAttr { return nil }

func lockThread() {}
