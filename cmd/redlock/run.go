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

	// The library's own bound on a Lock whose servers do not answer is
	// --timeout (positive: the bound stays on), as for every other wait on
	// Redis here: a silent Redis ends even a wait without --wait, with its
	// cause, and not before the user said (the default is 10s).
	t, lk, code, ok := openLocks(c, &cf, name, stderr, redlock.WithTTL(*ttl), redlock.WithUnansweredLimit(cf.timeout))
	if !ok {
		return code
	}
	defer t.close()
	defer lk.Close()

	l, code, ok := acquire(lk, t, name, *meta, *try, *wait, sigs, stderr)
	if !ok {
		return code
	}
	return supervise(l, t, name, command, *grace, sigs, stderr)
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
// when Redis stops answering for --timeout while it waits. Its message
// says why from the error: another owner's hold only when Redis refused
// for that (exit 75), a refusal or silence of Redis otherwise (exit 69).
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
		release(l, t, name, "as the wait was given up", stderr)
	}
	cause := context.Cause(ctx)
	switch {
	case errors.As(cause, &sig):
		return nil, fail(stderr, exitSignalBase+sig.number(), "run %s: interrupted by %v while waiting for the lock", name, sig.s), false
	case cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, errWaitOver):
		// reachable gave up: Redis stopped answering, whatever the last
		// attempt heard.
		return nil, t.fail(stderr, "run "+name, cause), false
	}
	notObtained := "not obtained"
	if errors.Is(cause, errWaitOver) {
		notObtained = fmt.Sprintf("not obtained within --wait %v", wait)
	}
	switch code, why := t.explain(err); {
	case code == exitNotObtained:
		return nil, fail(stderr, code, "run %s: %s: %s", name, notObtained, why), false
	case code == 0 && errors.Is(cause, errWaitOver):
		return nil, fail(stderr, exitNotObtained, "run %s: %s", name, notObtained), false
	}
	return nil, t.fail(stderr, "run "+name, err), false
}

// errWaitOver is the cause of the end of a --wait.
var errWaitOver = errors.New("--wait ran out")

// signalled is the cause of a wait cut short by a signal.
type signalled struct{ s os.Signal }

func (s signalled) Error() string { return "interrupted by " + s.s.String() }

// supervise runs command while l is held: it forwards signals, terminates
// the command's process group when the lock is lost, and releases the lock
// once the command has exited. It returns redlock's exit code.
func supervise(l *redlock.Lock, t *target, name string, command []string, grace time.Duration, sigs <-chan os.Signal, stderr io.Writer) int {
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
		release(l, t, name, "as "+command[0]+" could not start", stderr)
		return startFailed(stderr, name, command[0], err)
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
			fmt.Fprintf(stderr, "redlock: run %s: lock lost (%s); sending SIGTERM to %s, SIGKILL after %v\n", name, t.lossText(l.Err()), command[0], grace)
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
		fmt.Fprintf(stderr, "redlock: run %s: the guard of %s was killed (%v); killing the rest of its process group\n", name, command[0], cmd.ProcessState)
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
		return fail(stderr, exitLost, "run %s: lock lost as %s exited (%s)", name, command[0], t.lossText(err))
	}
	if !release(l, t, name, "when "+command[0]+" exited", stderr) {
		return exitLost
	}
	return exitStatus(cmd.ProcessState)
}

// startFailed reports a command that could not be started: 127 if it was
// not found, else 126. It runs in the guard as well, which has the lock's
// name from REDLOCK_NAME.
func startFailed(stderr io.Writer, name, command string, err error) int {
	code := exitCannotRun
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		code = exitNotFound
	}
	// The innermost error: exec's own ("fork/exec PATH: ...") names the
	// command again.
	return fail(stderr, code, "run %s: cannot start %s: %s", name, command, innermost(err))
}

// release unlocks l, bounded by --timeout, and reports whether it was still
// held; when says at what point, for the message. A release that fails for
// lack of an answer is logged: the lock frees itself when its lease ends.
func release(l *redlock.Lock, t *target, name, when string, stderr io.Writer) bool {
	ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
	defer cancel()
	switch err := l.Unlock(ctx); {
	case err == nil:
		return true
	case errors.Is(err, redlock.ErrNotHeld):
		fmt.Fprintf(stderr, "redlock: run %s: lock no longer held %s (%s)\n", name, when, t.lossText(err))
		return false
	default:
		_, why := t.explain(err)
		fmt.Fprintf(stderr, "redlock: run %s: release failed: %s; the lock frees itself when its lease ends\n", name, why)
		return true
	}
}
