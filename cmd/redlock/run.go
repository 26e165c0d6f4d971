package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"time"

	"github.com/redlockgo/redlock"
)

func runCmd(args []string, stdout, stderr io.Writer) int {
	c := newCommand("run", "redlock run [flags] NAME -- COMMAND [ARGS...]",
		"Acquires the lock NAME (waiting up to --wait, default forever; --try for one\n"+
			"attempt), runs COMMAND while the lock is renewed in the background, releases\n"+
			"it when COMMAND exits, and exits with COMMAND's code (128+N if it died by\n"+
			"signal N). Not obtained: exit 75. Lock lost while COMMAND runs: SIGTERM to\n"+
			"COMMAND's process group, SIGKILL after --grace, exit 76. SIGINT, SIGTERM\n"+
			"and SIGHUP are forwarded to COMMAND. COMMAND's environment gets\n"+
			"REDLOCK_NAME, REDLOCK_OWNER and REDLOCK_TOKEN (the fencing token).\n"+
			"On Unix, if redlock dies (even by SIGKILL), COMMAND's process group is\n"+
			"killed at once, before the lease ends. NAME comes before \"--\".\n")
	c.takesCommand = true
	var cf connFlags
	cf.register(c.fs)
	ttl := c.fs.Duration("ttl", 10*time.Second, "lease of the lock on the server, a `DURATION` renewed at a third of it")
	wait := c.fs.Duration("wait", 0, "give up (exit 75) if the lock is not obtained within this `DURATION`; 0: wait forever")
	try := c.fs.Bool("try", false, "one attempt: exit 75 at once if the lock is held")
	grace := c.fs.Duration("grace", 5*time.Second, "after the lock is lost, SIGKILL this `DURATION` after SIGTERM")
	meta := c.fs.String("metadata", "", "`TEXT` that 'redlock status' shows about the holder; default \"HOST pid PID: COMMAND\"")
	pos, command, code, done := c.parse(args, 1, stdout, stderr)
	switch {
	case done:
		return code
	case len(pos) == 0:
		return c.bad(stderr, "missing lock NAME before \"--\": redlock run NAME -- COMMAND [ARGS...]")
	case len(command) == 0:
		return c.bad(stderr, "missing COMMAND after NAME: redlock run NAME -- COMMAND [ARGS...]")
	case *ttl <= 0:
		return c.bad(stderr, "--ttl must be positive, got %v", *ttl)
	case *try && *wait != 0:
		return c.bad(stderr, "--try and --wait are exclusive")
	case *wait < 0:
		return c.bad(stderr, "--wait must not be negative, got %v", *wait)
	case *grace < 0:
		return c.bad(stderr, "--grace must not be negative, got %v", *grace)
	case len(*meta) > 64<<10:
		return c.bad(stderr, "--metadata of %d bytes, at most 64 KiB", len(*meta))
	}
	if err := cf.validate(); err != nil {
		return c.bad(stderr, "%v", err)
	}
	name := pos[0]
	if *meta == "" {
		*meta = defaultMetadata(command[0])
	}

	// Before anything else: a signal while waiting for the lock must stop
	// the wait, not kill redlock with a wait's key half set.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	t, lk, code, ok := openLocks(c, &cf, stderr, redlock.WithTTL(*ttl))
	if !ok {
		return code
	}
	defer t.close()
	defer lk.Close()

	l, code, ok := acquire(lk, t, name, *meta, *try, *wait, sigs, stderr)
	if !ok {
		return code
	}
	return supervise(l, name, command, *grace, cf.timeout, sigs, stderr)
}

// defaultMetadata names this run for `status`: host, redlock's pid (the
// command's process group is led by redlock's guard, a child of redlock)
// and the command.
func defaultMetadata(command string) string {
	host, err := os.Hostname()
	if err != nil {
		host = "?"
	}
	return fmt.Sprintf("%s pid %d: %s", host, os.Getpid(), command)
}

// acquire takes the lock, giving up on --wait, on a signal (exit 128+N), or
// when Redis stops answering for --timeout while it waits.
func acquire(lk locks, t *target, name, meta string, try bool, wait time.Duration, sigs <-chan os.Signal, stderr io.Writer) (*redlock.Lock, int, bool) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	if wait > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, wait, errWaitOver)
		defer stop()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel(nil) // before wg.Wait: stops the goroutines below
	wg.Go(func() {
		select {
		case s := <-sigs:
			cancel(signalled{s})
		case <-ctx.Done():
		}
	})
	if !try {
		wg.Go(func() { t.reachable(ctx, func(err error) { cancel(err) }) })
	}

	var (
		l   *redlock.Lock
		err error
	)
	if try {
		l, err = lk.TryLock(ctx, name, redlock.WithMetadata(meta))
	} else {
		l, err = lk.Lock(ctx, name, redlock.WithMetadata(meta))
	}
	var sig signalled
	if err == nil {
		cancel(nil)
		wg.Wait()
		if !errors.As(context.Cause(ctx), &sig) {
			return l, 0, true
		}
		// The signal came as the lock was granted: the wait was to be
		// given up, and the command has not started.
		release(l, name, t.timeout, stderr)
	}
	switch cause := context.Cause(ctx); {
	case errors.As(cause, &sig):
		return nil, fail(stderr, exitSignalBase+sig.number(), "interrupted by %v while waiting for %s", sig.s, name), false
	case errors.Is(cause, errWaitOver):
		return nil, fail(stderr, exitNotObtained, "%s not obtained within --wait %v: held by another owner", name, wait), false
	case cause != nil && !errors.Is(cause, context.Canceled):
		return nil, fail(stderr, exitUnavailable, "waiting for %s: %s", name, oneLine(cause)), false
	case isRedisError(err) || !errors.Is(err, redlock.ErrNotObtained):
		return nil, fail(stderr, exitUnavailable, "acquiring %s: %s", name, oneLine(err)), false
	}
	return nil, fail(stderr, exitNotObtained, "%s is held by another owner: not obtained", name), false
}

// errWaitOver is the cause of the end of a --wait.
var errWaitOver = errors.New("--wait ran out")

// signalled is the cause of a wait cut short by a signal.
type signalled struct{ s os.Signal }

func (s signalled) Error() string { return "interrupted by " + s.s.String() }

// supervise runs command while l is held: it forwards signals, terminates
// the command's process group when the lock is lost, and releases the lock
// once the command has exited. It returns redlock's exit code.
func supervise(l *redlock.Lock, name string, command []string, grace, timeout time.Duration, sigs <-chan os.Signal, stderr io.Writer) int {
	env := append(os.Environ(),
		"REDLOCK_NAME="+name,
		"REDLOCK_OWNER="+l.Owner(),
		"REDLOCK_TOKEN="+strconv.FormatInt(l.Token(), 10),
	)
	// Its own process group, so that a lost lock stops everything the
	// command started, not only its first process. At a terminal, that
	// group takes the terminal over while it runs, as a shell's job does:
	// keys like ^C reach the command directly. Where there are process
	// groups a guard leads the group, and kills it if redlock dies
	// (guard_unix.go).
	tty := inForeground()
	cmd, lifeline, err := startCommand(command, env, tty)
	if err != nil {
		release(l, name, timeout, stderr)
		return startFailed(stderr, command[0], err)
	}
	defer lifeline.Close() // after the guard's exit: closing it earlier kills the group
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the exit status is read from cmd.ProcessState
		if tty {
			reclaimTerminal()
		}
		close(exited)
	}()

	lost := l.Done()
	var (
		killAt   <-chan time.Time
		wasLost  bool
		deadline time.Time
	)
	for running := true; running; {
		select {
		case <-exited:
			running = false
		case s := <-sigs:
			signalGroup(cmd.Process.Pid, s)
		case <-lost:
			lost = nil
			wasLost = true
			deadline = time.Now().Add(grace)
			fmt.Fprintf(stderr, "redlock: lost the lock %s (%s); sending SIGTERM to %s, SIGKILL after %v\n", name, oneLine(l.Err()), command[0], grace)
			terminateGroup(cmd.Process.Pid)
			timer := time.NewTimer(grace)
			defer timer.Stop()
			killAt = timer.C
		case <-killAt:
			killAt = nil
			killGroup(cmd.Process.Pid)
		}
	}
	if !wasLost && guardKilled(cmd.ProcessState) {
		// Nothing watches for redlock's death any more in what is left of
		// the group: end it now rather than leave it unguarded, and before
		// the release below, so that none of it outlives the lock.
		fmt.Fprintf(stderr, "redlock: the guard of %s was killed (%v); killing the rest of its process group\n", command[0], cmd.ProcessState)
		killGroup(cmd.Process.Pid)
		groupAlive(cmd.Process.Pid, time.Now().Add(grace))
	}
	if wasLost {
		// The command's first process is gone; whatever else of its group
		// is left gets the rest of the grace, then SIGKILL.
		if groupAlive(cmd.Process.Pid, deadline) {
			killGroup(cmd.Process.Pid)
		}
		return exitLost
	}
	if err := l.Err(); errors.Is(err, redlock.ErrLost) {
		// Lost as the command finished: its last steps may have overlapped
		// another holder's.
		return fail(stderr, exitLost, "lost the lock %s as %s exited (%s)", name, command[0], oneLine(err))
	}
	if !release(l, name, timeout, stderr) {
		return exitLost
	}
	return exitStatus(cmd.ProcessState)
}

// startFailed reports a command that could not be started: 127 if it was
// not found, else 126.
func startFailed(stderr io.Writer, command string, err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return fail(stderr, exitNotFound, "%s: %v", command, err)
	}
	return fail(stderr, exitCannotRun, "%s: %v", command, err)
}

// release unlocks l, bounded by timeout, and reports whether it was still held. A
// release that fails for lack of an answer is logged: the lock frees itself
// when its lease ends.
func release(l *redlock.Lock, name string, timeout time.Duration, stderr io.Writer) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	switch err := l.Unlock(ctx); {
	case err == nil:
		return true
	case errors.Is(err, redlock.ErrNotHeld):
		fmt.Fprintf(stderr, "redlock: the lock %s was no longer held when the command exited (%s)\n", name, oneLine(err))
		return false
	default:
		fmt.Fprintf(stderr, "redlock: releasing %s: %s; it frees itself when its lease ends\n", name, oneLine(err))
		return true
	}
}
