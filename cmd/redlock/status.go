package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/redlockgo/redlock"
)

func statusCmd(args []string, stdout, stderr io.Writer) int {
	c := newCommand("status", "redlock status [flags] NAME",
		"Prints who holds the lock NAME, one 'key: value' per line: held, owner,\n"+
			"remaining ttl on the server, the last fencing token, metadata, readers.\n"+
			"Exit code 0 if held, 1 if free, 69 if Redis cannot tell (never 0 or 1).\n"+
			"In --redlock mode a lock is held when a quorum of masters agrees.\n"+
			"On a replica it shows the replica's copy and says on stderr that it is one.\n")
	c.readOnly = true
	var cf connFlags
	cf.register(c.fs)
	asJSON := c.fs.Bool("json", false, "print one JSON object instead")
	pos, rest, code, done := c.parse(args, 1, stdout, stderr)
	switch {
	case done:
		return code
	case len(pos) == 0:
		return c.bad(stderr, "missing lock NAME")
	case len(rest) > 0:
		return c.bad(stderr, "unexpected argument %q", rest[0])
	}
	if err := cf.validate(); err != nil {
		return c.bad(stderr, "%v", err)
	}
	name := pos[0]

	return oneCall(c, &cf, name, stderr, func(ctx context.Context, t *target, lk locks) int {
		return printStatus(ctx, t, lk, name, *asJSON, stdout, stderr)
	})
}

// printStatus is status once connected.
func printStatus(ctx context.Context, t *target, lk locks, name string, asJSON bool, stdout, stderr io.Writer) int {
	h, err := lk.Inspect(ctx, name)
	if err != nil {
		return t.fail(stderr, "status "+name, err)
	}
	if asJSON {
		b, err := json.Marshal(statusJSON{
			Name: name, Held: h.Held, Owner: h.Owner, TTL: ttlString(h.TTL), TTLMillis: ttlMillis(h.TTL),
			Token: h.Token, Metadata: h.Metadata, Readers: h.Readers,
		})
		if err != nil {
			return fail(stderr, exitUnavailable, "status %s: %v", name, err)
		}
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		fmt.Fprintf(stdout, "name: %s\nheld: %t\nowner: %s\nttl: %s\nttl_ms: %d\ntoken: %d\nmetadata: %s\nreaders: %d\n",
			name, h.Held, h.Owner, ttlString(h.TTL), ttlMillis(h.TTL), h.Token, h.Metadata, h.Readers)
	}
	if h.Held {
		return exitOK
	}
	return exitFree
}

// statusJSON is status --json: the same keys as the text form.
type statusJSON struct {
	Name      string `json:"name"`
	Held      bool   `json:"held"`
	Owner     string `json:"owner"`
	TTL       string `json:"ttl"`
	TTLMillis int64  `json:"ttl_ms"`
	Token     int64  `json:"token"`
	Metadata  string `json:"metadata"`
	Readers   int    `json:"readers"`
}

// ttlString prints a lease to the millisecond; "none" for a key without
// expiry, which this library never writes.
func ttlString(d time.Duration) string {
	if d < 0 {
		return "none"
	}
	return d.Round(time.Millisecond).String()
}

// ttlMillis is the lease in ms, -1 for a key without expiry.
func ttlMillis(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Milliseconds()
}

func unlockCmd(args []string, stdout, stderr io.Writer) int {
	c := newCommand("unlock", "redlock unlock [flags] NAME --owner OWNER",
		"Releases the lock NAME if, and only if, OWNER holds it: for an operator\n"+
			"freeing a stuck holder's lock (its owner value is in 'redlock status').\n"+
			"On a single server OWNER may also be a read hold's or a semaphore permit's.\n"+
			"Prints what it released: NAME, OWNER, and the token and metadata of an\n"+
			"exclusive holder. Exit code 0 if released, 1 if not held by OWNER, 69 if\n"+
			"Redis failed or is a replica.\n"+
			"A 'redlock run' holding it finds the lock lost and terminates its command.\n")
	var cf connFlags
	cf.register(c.fs)
	owner := c.fs.String("owner", "", "`OWNER` value of the holder to release, as 'redlock status' shows it (required)")
	pos, rest, code, done := c.parse(args, 1, stdout, stderr)
	switch {
	case done:
		return code
	case len(pos) == 0:
		return c.bad(stderr, "missing lock NAME")
	case len(rest) > 0:
		return c.bad(stderr, "unexpected argument %q", rest[0])
	case *owner == "":
		return c.bad(stderr, "missing --owner")
	}
	if err := cf.validate(); err != nil {
		return c.bad(stderr, "%v", err)
	}
	name := pos[0]

	return oneCall(c, &cf, name, stderr, func(ctx context.Context, t *target, lk locks) int {
		// Read first, to say what was released; a failed read costs only
		// that detail, never the release.
		h, herr := lk.Inspect(ctx, name)
		switch err := lk.Release(ctx, name, *owner); {
		case err == nil:
			fmt.Fprintf(stdout, "released %s (owner %s", name, *owner)
			if herr == nil && h.Owner == *owner {
				fmt.Fprintf(stdout, ", token %d, metadata %q", h.Token, h.Metadata)
			}
			fmt.Fprintln(stdout, ")")
			return exitOK
		case errors.Is(err, redlock.ErrNotHeld):
			return fail(stderr, exitFree, "unlock %s: not held by owner %s (run 'redlock status %s' with the same flags to see who holds it)", name, *owner, name)
		default:
			return t.fail(stderr, "unlock "+name, err)
		}
	})
}

// oneCall connects, runs fn with a ctx bounded by --timeout, and
// disconnects: status and unlock are one request each on the lock name.
func oneCall(c *command, cf *connFlags, name string, stderr io.Writer, fn func(context.Context, *target, locks) int) int {
	t, lk, code, ok := openLocks(c, cf, name, stderr)
	if !ok {
		return code
	}
	defer t.close()
	defer lk.Close()
	ctx, cancel := context.WithTimeout(context.Background(), cf.timeout)
	defer cancel()
	return fn(ctx, t, lk)
}
