package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redlockgo/redlock"
)

// elections is what leader uses of a *redlock.Locker or *redlock.Redlock,
// beyond the locks interface.
type elections interface {
	Election(name string, opts ...redlock.Option) *redlock.Election
}

func leaderCmd(args []string, stdout, stderr io.Writer) int {
	c := newCommand("leader", "redlock leader [flags] NAME",
		"Prints the leader of the election NAME (a program's Election(NAME)): its\n"+
			"announced value, its term (the fencing token of its lock) and the\n"+
			"remaining ttl on the server. Exit code 0 if there is a leader, 1 if\n"+
			"none, 69 if Redis cannot tell. With --watch it prints the leader, then\n"+
			"one line per change as Redis pushes it (term 0: no leader, or not known\n"+
			"while the connection is down) until interrupted, and exits 0.\n"+
			"On a replica it shows the replica's copy and says on stderr that it is one.\n")
	c.readOnly = true
	var cf connFlags
	cf.register(c.fs)
	asJSON := c.fs.Bool("json", false, "print JSON objects instead (one per line with --watch)")
	watchFlag := c.fs.Bool("watch", false, "print each change of leader as it happens, until interrupted")
	pos, rest, code, done := c.parse(args, 1, stdout, stderr)
	switch {
	case done:
		return code
	case len(pos) == 0:
		return c.bad(stderr, "missing election NAME")
	case len(rest) > 0:
		return c.bad(stderr, "unexpected argument %q", rest[0])
	}
	if err := cf.validate(); err != nil {
		return c.bad(stderr, "%v", err)
	}
	name := pos[0]

	if !*watchFlag {
		return oneCall(c, &cf, name, stderr, func(ctx context.Context, t *target, lk locks) int {
			l, err := lk.(elections).Election(name).Leader(ctx)
			switch {
			case errors.Is(err, redlock.ErrNoLeader):
				printLeader(stdout, name, redlock.Leader{}, *asJSON, false)
				return exitFree
			case err != nil:
				return t.fail(stderr, "leader "+name, err)
			}
			printLeader(stdout, name, l, *asJSON, false)
			return exitOK
		})
	}

	t, lk, code, ok := openLocks(c, &cf, name, stderr)
	if !ok {
		return code
	}
	defer t.close()
	defer lk.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// Observe sends nothing while nobody leads: say so once, as the
	// one-shot form would.
	if _, err := lk.(elections).Election(name).Leader(ctx); errors.Is(err, redlock.ErrNoLeader) {
		printLeader(stdout, name, redlock.Leader{}, *asJSON, true)
	}
	for l := range lk.(elections).Election(name).Observe(ctx) {
		printLeader(stdout, name, l, *asJSON, true)
	}
	return exitOK
}

// printLeader prints l: "key: value" lines, or one line per change with
// watch, or one JSON object per line.
func printLeader(w io.Writer, name string, l redlock.Leader, asJSON, watch bool) {
	switch {
	case asJSON:
		lj := leaderJSON{Name: name, Leader: l.Term != 0, Value: l.Value, Term: l.Term, TTL: ttlString(l.TTL), TTLMillis: ttlMillis(l.TTL)}
		if watch {
			lj.Time = time.Now().UTC().Format(time.RFC3339Nano)
		}
		b, _ := json.Marshal(lj) // plain strings and numbers: cannot fail
		fmt.Fprintf(w, "%s\n", b)
	case watch:
		fmt.Fprintf(w, "%s term=%d ttl=%s value=%q\n", time.Now().Format("15:04:05.000"), l.Term, ttlString(l.TTL), l.Value)
	default:
		fmt.Fprintf(w, "name: %s\nleader: %t\nvalue: %s\nterm: %d\nttl: %s\nttl_ms: %d\n",
			name, l.Term != 0, l.Value, l.Term, ttlString(l.TTL), ttlMillis(l.TTL))
	}
}

// leaderJSON is leader --json: the keys of the text form, plus the time of
// the change with --watch.
type leaderJSON struct {
	Name      string `json:"name"`
	Leader    bool   `json:"leader"`
	Value     string `json:"value"`
	Term      int64  `json:"term"`
	TTL       string `json:"ttl"`
	TTLMillis int64  `json:"ttl_ms"`
	Time      string `json:"time,omitempty"`
}
