package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// openPTY returns the master and the slave of a new pseudo-terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	ioctl := func(req uintptr, arg *int32) {
		t.Helper()
		if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), req, uintptr(unsafe.Pointer(arg))); errno != 0 {
			master.Close()
			t.Skipf("pseudo-terminal ioctl %#x: %v", req, errno)
		}
	}
	var unlock, n int32
	ioctl(syscall.TIOCSPTLCK, &unlock)
	ioctl(syscall.TIOCGPTN, &n)
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		t.Skipf("opening the pseudo-terminal's slave: %v", err)
	}
	return master, slave
}

// TestRunAtTerminal: run from an interactive terminal hands it to the
// command (whose process group is not redlock's), so that the command can
// read it instead of being stopped by SIGTTIN, and ^C reaches the command.
func TestRunAtTerminal(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		input, script, want string
		code                int
	}{
		{"hello\n", `read line; echo "got $line"; exit 4`, "got hello", 4},
		{"\x03", `trap 'echo "got INT"; exit 9' INT; echo ready; i=0; while [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done`, "got INT", 9},
	} {
		master, slave := openPTY(t)
		cmd := exec.Command(bin, "run", "--addr", srv.Addr(), "tty", "--", "sh", "-c", tc.script)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		// A session of its own with the terminal as controlling terminal:
		// redlock is its foreground job, as when typed at a shell.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		require.NoError(t, cmd.Start())
		slave.Close()
		// The terminal's output, chunk by chunk; the reader ends with EIO
		// once every holder of the slave has exited.
		chunks := make(chan string, 64)
		go func() {
			defer close(chunks)
			buf := make([]byte, 4096)
			for {
				n, err := master.Read(buf)
				if n > 0 {
					chunks <- string(buf[:n])
				}
				if err != nil {
					return
				}
			}
		}()
		var out strings.Builder
		if strings.Contains(tc.script, "ready") {
			// ^C only once the command's trap is set.
			deadline := time.After(longWait)
			for !strings.Contains(out.String(), "ready") {
				select {
				case c, ok := <-chunks:
					require.True(t, ok, "terminal closed before the command was ready: %q", out.String())
					out.WriteString(c)
				case <-deadline:
					t.Fatalf("command not ready after %v: %q", longWait, out.String())
				}
			}
		}
		_, err := master.Write([]byte(tc.input))
		require.NoError(t, err)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-exited:
		case <-time.After(longWait):
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("run at a terminal with input %q still running after %v", tc.input, longWait)
		}
		for c := range chunks {
			out.WriteString(c)
		}
		master.Close()
		assert.Equal(t, tc.code, cmd.ProcessState.ExitCode(), "exit code; terminal output %q", out.String())
		assert.Contains(t, out.String(), tc.want)
	}
}
