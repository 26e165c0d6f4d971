//go:build unix

package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// Why a guard. A `redlock run` killed by SIGKILL (the OOM killer, kill -9)
// releases nothing and terminates nothing: its command would run on after
// the lease ran out, alongside the next holder's. So the command's process
// group is led by a guard, redlock itself re-executed as
// "redlock __guard COMMAND [ARGS...]", which starts the command in its group
// and holds the read end of a pipe whose only write end is redlock's. The
// kernel closes that end whatever way redlock dies, the guard reads EOF and
// SIGKILLs its whole group, itself included, within milliseconds: the
// lease, renewed every third of the TTL, normally has two thirds left, and
// the guard needs no Redis to act.
//
// Designs rejected:
//   - Pdeathsig on the command: it reaches the first process only, not its
//     children (a shell's pipeline, a "sleep &"), and fires when the thread
//     that forked exits, not the process, so redlock would have to keep one
//     OS thread for it. It is Linux-only too. The guard uses it, on Linux,
//     for what it is good at: the command's first process dies with its
//     guard (see commandAttr).
//   - Pdeathsig on a group leader that then kills the group: it needs a
//     signal the leader can catch, fires on thread exit (as above), and is
//     Linux-only; the pipe does the same on every Unix, with no thread to
//     keep.
//   - A shell as group leader ("trap ... ; wait"): it would depend on the
//     shell's handling of signals and job control, and cannot watch a pipe
//     without a helper program.
//
// The guard exits with its command's status (128+N for signal N), so
// redlock reads it as it read the command's own. It dies by a signal only if
// one it does not catch is sent to it; redlock then kills the group, which
// no guard watches any longer (see guardKilled).

// guardArg is the hidden subcommand the guard runs as.
const guardArg = "__guard"

// lifelineFD is the guard's end of the pipe, ExtraFiles[0] in redlock.
const lifelineFD = 3

// startCommand starts command in a process group of its own, led by a
// guard, with env as its environment; with foreground, the group becomes the
// terminal's foreground job. Its result's Pid is the group's. The returned
// lifeline must stay open until the process has exited: closing it kills
// the group.
func startCommand(command, env []string, foreground bool) (*exec.Cmd, io.Closer, error) {
	exe, err := selfExe()
	if err != nil {
		return nil, nil, fmt.Errorf("finding redlock's own binary for the guard: %v", err)
	}
	r, w, err := os.Pipe() // both ends close-on-exec: the write end stays redlock's only
	if err != nil {
		return nil, nil, fmt.Errorf("lifeline for the guard: %v", err)
	}
	defer r.Close() // the guard has its copy
	cmd := exec.Command(exe, append([]string{guardArg}, command...)...)
	cmd.Args[0] = os.Args[0] // ps shows "redlock __guard COMMAND ..."
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{r}
	cmd.SysProcAttr = groupAttr(foreground)
	if err := cmd.Start(); err != nil {
		w.Close()
		// Not wrapped: a guard that is not found is not a COMMAND that is
		// not found.
		return nil, nil, fmt.Errorf("its guard %s: %s", exe, innermost(err))
	}
	return cmd, w, nil
}

// guardKilled reports whether the guard died by a signal instead of exiting
// with its command's status: what is left of its group is unguarded.
func guardKilled(ps *os.ProcessState) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// guardSignals are the signals whose default action ends a process and that
// a group gets from a terminal (^C, ^\), from redlock's forwarding, or from
// a kill of the group. They are meant for the command, which gets its own
// copy; the guard must outlive them to report the command's status.
var guardSignals = []os.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM,
}

// guardCmd is the guard: "redlock __guard COMMAND [ARGS...]", the leader of
// the command's process group, with the lifeline on fd 3. It runs the
// command and exits with its status, or kills the group the moment redlock
// is gone.
func guardCmd(args []string, stderr io.Writer) int {
	var st syscall.Stat_t
	if len(args) == 0 || syscall.Fstat(lifelineFD, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return fail(stderr, exitUsage, "%s is internal to redlock run", guardArg)
	}
	syscall.CloseOnExec(lifelineFD) // the command needs no copy
	lifeline := os.NewFile(lifelineFD, "lifeline")

	// Caught, not ignored: the command then starts with the default
	// actions, as it would without a guard. A signal ignored when redlock
	// started (nohup, a shell's background job) stays ignored for both.
	// The buffer of one is never read: signal.Notify drops what does not
	// fit, and catching is all the guard wants.
	for _, s := range guardSignals {
		if !signal.Ignored(s) {
			signal.Notify(make(chan os.Signal, 1), s)
		}
	}
	// The thread that starts the command must outlive it, for commandAttr's
	// parent-death signal; this goroutine ends only with the process.
	lockThread()

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = commandAttr()
	if err := cmd.Start(); err != nil {
		return startFailed(stderr, os.Getenv("REDLOCK_NAME"), args[0], err)
	}
	// Owned by the process: it ends with it, by the kill or by os.Exit.
	go func() {
		// Nothing is ever written: the read returns at EOF, when redlock's
		// end closes because redlock is gone (or on an error, also taken
		// for redlock's end).
		_, _ = lifeline.Read(make([]byte, 1))
		_ = syscall.Kill(0, syscall.SIGKILL) // 0: this process's group
	}()
	_ = cmd.Wait() // the status is read from cmd.ProcessState
	return exitStatus(cmd.ProcessState)
}
