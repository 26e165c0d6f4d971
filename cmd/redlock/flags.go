package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
)

// connFlags are the flags every command that talks to Redis takes. A flag
// that only one command uses (run's --ttl) is that command's own, so that
// the others reject it instead of ignoring it.
type connFlags struct {
	addr    string
	redlock string
	prefix  string
	timeout time.Duration
}

// The placeholders in back quotes are what PrintDefaults shows after each
// flag (flag.UnquoteUsage): they name what the value is.
func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", "", "Redis `URL` or host:port (default $REDIS_URL, else "+defaultURL+")")
	fs.StringVar(&c.redlock, "redlock", "", "comma-separated Redis `URLs` of independent masters: Redlock quorum mode")
	fs.StringVar(&c.prefix, "prefix", "redlock:", "key `PREFIX`: the lock NAME is the Redis key \"{PREFIX+NAME}\"")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "give up on a Redis that does not answer within this `DURATION`")
}

func (c *connFlags) validate() error {
	switch {
	case c.addr != "" && c.redlock != "":
		return errors.New("--addr and --redlock are exclusive")
	case c.timeout <= 0:
		return fmt.Errorf("--timeout must be positive, got %v", c.timeout)
	case c.prefix == "":
		return errors.New("--prefix must not be empty")
	}
	return nil
}

// command is one subcommand's flag set and usage text.
type command struct {
	fs       *flag.FlagSet
	synopsis string // "redlock status [flags] NAME"
	about    string // what it does, a few lines
	// readOnly: the command only reads (status, leader), so a replica can
	// answer it, from a copy that may lag its master.
	readOnly bool
	// takesCommand: a COMMAND follows NAME ("run NAME -- COMMAND"), so
	// "--" ends the positional arguments as well as the flags.
	takesCommand bool
}

func newCommand(name, synopsis, about string) *command {
	c := &command{fs: flag.NewFlagSet("redlock "+name, flag.ContinueOnError), synopsis: synopsis, about: about}
	// parse reports its errors itself, and usage prints the help.
	c.fs.SetOutput(io.Discard)
	return c
}

func (c *command) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\nFlags:\n", c.synopsis, c.about)
	var b strings.Builder
	c.fs.SetOutput(&b)
	c.fs.PrintDefaults()
	c.fs.SetOutput(io.Discard)
	// PrintDefaults writes "-addr"; the prose, the errors and the examples
	// all say "--addr", and parse takes both: print the one spelling.
	io.WriteString(w, flagStart.ReplaceAllString(b.String(), "  --"))
}

// flagStart is where PrintDefaults starts a flag's line: "  -name".
var flagStart = regexp.MustCompile(`(?m)^  -`)

// parse parses args with flags anywhere among them, so that flags may follow
// NAME ("unlock NAME --owner X"). It returns up to maxPos positional
// arguments and, after them, the rest verbatim: for run, the command and its
// own flags. "--" ends the flags. For a command that takes a COMMAND, all
// after "--" is the rest: "run -- /bin/sh -c X" lacks a NAME, it must not
// lock "/bin/sh" and run "-c". Elsewhere what follows "--" fills the
// positional arguments still missing ("status -- -odd-name"), then the rest.
//
// It returns done=true with the exit code when there is nothing more to do:
// --help (usage on stdout, 0) or a bad flag (one line on stderr, 2). It
// sets the flags itself (FlagSet.Set) rather than through FlagSet.Parse, so
// that its messages name the flag as the user wrote it and say what value
// it wants.
func (c *command) parse(args []string, maxPos int, stdout, stderr io.Writer) (pos, rest []string, code int, done bool) {
	i := 0
scan:
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			i++
			if c.takesCommand {
				maxPos = len(pos)
			}
			break scan
		case len(a) > 1 && a[0] == '-':
			name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			f := c.fs.Lookup(name)
			switch {
			case f == nil && (name == "h" || name == "help"):
				c.usage(stdout)
				return nil, nil, exitOK, true
			case f == nil:
				return nil, nil, c.bad(stderr, "unknown flag --%s", name), true
			case hasValue:
			case isBool(f):
				value = "true"
			case i+1 < len(args):
				i++
				value = args[i]
			default:
				return nil, nil, c.bad(stderr, "--%s needs a value: %s", name, placeholder(f)), true
			}
			if err := c.fs.Set(name, value); err != nil {
				return nil, nil, c.bad(stderr, "invalid value %q for --%s: want %s", value, name, placeholder(f)), true
			}
		case len(pos) < maxPos:
			pos = append(pos, a)
		default:
			break scan
		}
	}
	for ; i < len(args) && len(pos) < maxPos; i++ {
		pos = append(pos, args[i])
	}
	return pos, args[i:], 0, false
}

// placeholder names the value f takes, as the usage shows it.
func placeholder(f *flag.Flag) string {
	name, _ := flag.UnquoteUsage(f)
	switch {
	case name == "":
		return "true or false"
	case name == "DURATION":
		return "a DURATION such as 30s, 10m or 1h30m"
	}
	return name
}

// bad reports a usage error: one line naming it, and where the usage is.
func (c *command) bad(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "redlock: "+format+" (see %s --help)\n", append(args, c.fs.Name())...)
	return exitUsage
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// op names an operation of this command on the lock name, as failures
// print it: "status NAME".
func (c *command) op(name string) string {
	return strings.TrimPrefix(c.fs.Name(), "redlock ") + " " + name
}
