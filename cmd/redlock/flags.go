package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// connFlags are the flags every command that talks to Redis takes.
type connFlags struct {
	addr    string
	redlock string
	ttl     time.Duration
	prefix  string
	timeout time.Duration
}

func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", "", "Redis `URL` or host:port (default $REDIS_URL, else "+defaultURL+")")
	fs.StringVar(&c.redlock, "redlock", "", "comma-separated Redis `URLs` of independent masters: Redlock quorum mode")
	fs.DurationVar(&c.ttl, "ttl", 10*time.Second, "lease of the lock on the server, renewed at a third of it")
	fs.StringVar(&c.prefix, "prefix", "redlock:", "key prefix: the lock NAME is the Redis key \"{PREFIX+NAME}\"")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "give up on a Redis that does not answer within this `duration`")
}

func (c *connFlags) validate() error {
	switch {
	case c.addr != "" && c.redlock != "":
		return errors.New("--addr and --redlock are exclusive")
	case c.ttl <= 0:
		return fmt.Errorf("--ttl must be positive, got %v", c.ttl)
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
	// takesCommand: a COMMAND follows NAME ("run NAME -- COMMAND"), so
	// "--" ends the positional arguments as well as the flags.
	takesCommand bool
}

func newCommand(name, synopsis, about string) *command {
	c := &command{fs: flag.NewFlagSet("redlock "+name, flag.ContinueOnError), synopsis: synopsis, about: about}
	// Parse errors and -help are reported by parse, to the right stream.
	c.fs.SetOutput(io.Discard)
	return c
}

func (c *command) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\nFlags:\n", c.synopsis, c.about)
	c.fs.SetOutput(w)
	c.fs.PrintDefaults()
	c.fs.SetOutput(io.Discard)
}

// parse parses args with flags anywhere among them, so that flags may follow
// NAME ("unlock NAME --owner X"). It returns up to maxPos positional
// arguments and, after them, the rest verbatim: for run, the command and its
// own flags. "--" ends the flags. For a command that takes a COMMAND, all
// after "--" is the rest: "run -- /bin/sh -c X" lacks a NAME, it must not
// lock "/bin/sh" and run "-c". Elsewhere what follows "--" fills the
// positional arguments still missing ("status -- -odd-name"), then the rest.
//
// It returns done=true with the exit code when there is nothing more to do:
// --help (usage on stdout, 0) or a bad flag (message and usage on stderr, 2).
func (c *command) parse(args []string, maxPos int, stdout, stderr io.Writer) (pos, rest []string, code int, done bool) {
	var flags []string
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
			flags = append(flags, a)
			name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if f := c.fs.Lookup(name); f != nil && !hasValue && !isBool(f) && i+1 < len(args) {
				i++
				flags = append(flags, args[i])
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
	rest = args[i:]
	if err := c.fs.Parse(flags); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.usage(stdout)
			return nil, nil, exitOK, true
		}
		return nil, nil, c.bad(stderr, "%v", err), true
	}
	return pos, rest, 0, false
}

// bad reports a usage error: one line, then the usage, on stderr.
func (c *command) bad(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "%s: "+format+"\n\n", append([]any{c.fs.Name()}, args...)...)
	c.usage(stderr)
	return exitUsage
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
