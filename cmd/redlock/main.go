// Command redlock runs a program under a distributed lock on Redis, so that
// it runs on one host at a time: flock(1) across hosts. It also shows who
// holds a lock and lets an operator release a stuck one.
//
//	redlock run [flags] NAME -- COMMAND [ARGS...]
//	redlock status [flags] NAME
//	redlock unlock [flags] NAME --owner OWNER
//	redlock leader [flags] NAME [--watch]
//	redlock version
//
// Install it with
//
//	go install github.com/redlockgo/redlock/cmd/redlock@latest
//
// Run "redlock --help" for the examples and exit codes, and
// "redlock COMMAND --help" for the flags of a command. It is built on the
// public API of github.com/redlockgo/redlock only.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
)

// Exit codes. The child's own code passes through `run` unchanged, so the
// codes of redlock itself are the ones shells and sysexits.h reserve.
const (
	exitOK          = 0  // done; status: held
	exitFree        = 1  // status: free; unlock: not held by that owner
	exitUsage       = 2  // bad flags or arguments
	exitUnavailable = 69 // EX_UNAVAILABLE: Redis unreachable, refusing, or failing
	exitNotObtained = 75 // EX_TEMPFAIL: the lock is held by another owner (--try, --wait ran out)
	exitLost        = 76 // the lock was lost while the command ran; the command was terminated
	exitCannotRun   = 126
	exitNotFound    = 127
	exitSignalBase  = 128 // + signal number: the command died by that signal
)

const usage = `redlock runs a command while holding a distributed lock on Redis, so that
it runs on one host at a time, and shows or releases locks.

Usage:
  redlock run [flags] NAME -- COMMAND [ARGS...]
  redlock status [flags] NAME
  redlock unlock [flags] NAME --owner OWNER
  redlock leader [flags] NAME [--watch]
  redlock version

run waits for the lock NAME (--wait, default forever; --try for one
attempt), runs COMMAND with the lock renewed in the background, releases it
when COMMAND exits and exits with COMMAND's code. COMMAND inherits
redlock's environment, stdin, stdout and stderr, plus REDLOCK_NAME,
REDLOCK_OWNER and REDLOCK_TOKEN (the fencing token). If the lock is lost,
COMMAND's process group gets SIGTERM, then SIGKILL after --grace.
SIGINT, SIGTERM and SIGHUP are forwarded to COMMAND.

Redis: --addr or $REDIS_URL (redis://user:pass@host:port/db, rediss:// for
TLS; default redis://127.0.0.1:6379/0), or --redlock URL,URL,... for a
quorum over independent masters. Flags may come before or after NAME.

Examples:
  # Cron, on every host: the first to start sends the report, the others skip it.
  redlock run --try nightly-report -- /usr/local/bin/send-report

  # Wait up to 10 minutes for the deploy lock.
  REDIS_URL=redis://:secret@redis.internal:6379/0 redlock run --wait 10m deploy -- ./deploy.sh

  # Quorum over three independent masters.
  redlock run --redlock redis://a:6379,redis://b:6379,redis://c:6379 job -- ./job.sh

  # Who holds it, and until when.
  redlock status deploy
  redlock status --json deploy

  # Free a lock whose holder is stuck (the owner value is in status).
  redlock unlock deploy --owner 1b4e28ba-2fa1-11d2-883f-0016d3cca427

  # Who leads the election "scheduler" (value, term, ttl), and every change.
  redlock leader scheduler
  redlock leader scheduler --watch

Exit codes:
  0        run: COMMAND exited 0; status: held; unlock: released; leader: one leads
  1        status: free; unlock: not held by that owner; leader: none
  2        bad flags or arguments
  69       Redis unreachable within --timeout, or refusing; run, unlock: a replica
  75       run: not obtained (--try, or --wait ran out)
  76       run: lock lost while COMMAND ran; COMMAND was terminated
  126/127  run: COMMAND could not be started / not found
  128+N    run: COMMAND died by signal N
  other    run: COMMAND's own exit code

Run 'redlock COMMAND --help' for the flags of a command.
`

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

// cli runs the command line args and returns the exit code.
func cli(args []string, stdout, stderr io.Writer) int {
	silenceGoRedis()
	if len(args) == 0 {
		return fail(stderr, exitUsage, "missing command: run, status, unlock, leader or version (see redlock --help)")
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "run":
		return runCmd(rest, stdout, stderr)
	case "status":
		return statusCmd(rest, stdout, stderr)
	case "unlock":
		return unlockCmd(rest, stdout, stderr)
	case "leader":
		return leaderCmd(rest, stdout, stderr)
	case guardArg: // run's own, not in the usage
		return guardCmd(rest, stderr)
	case "version", "-version", "--version":
		fmt.Fprintf(stdout, "redlock %s (%s %s/%s)\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return exitOK
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 && (rest[0] == "run" || rest[0] == "status" || rest[0] == "unlock" || rest[0] == "leader") {
			return cli([]string{rest[0], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		return fail(stderr, exitUsage, "unknown command %q (see redlock --help)", cmd)
	}
}

// version is the module version `go install ...@version` stamped into the
// binary, or "(devel)" for a build from a checkout.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// oneLine flattens an error for one line of stderr: joined errors (one per
// Redis node) print on several lines otherwise.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}

// fail prints one line on stderr and returns code.
func fail(stderr io.Writer, code int, format string, args ...any) int {
	fmt.Fprintf(stderr, "redlock: "+format+"\n", args...)
	return code
}
