//go:build unix

package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// usageLine checks that stderr is a usage error: one line of redlock's own
// ending in a hint to the help of the command args ran, not the usage.
func usageLine(t *testing.T, stderr string, args []string) {
	t.Helper()
	oneLineStderr(t, stderr)
	help := "(see redlock --help)\n"
	if len(args) > 0 && slices.Contains([]string{"run", "status", "unlock"}, args[0]) {
		help = "(see redlock " + args[0] + " --help)\n"
	}
	assert.True(t, strings.HasSuffix(stderr, help), "redlock %q: stderr = %q, want it to end with %q", args, stderr, help)
	assert.NotContains(t, stderr, "Usage", "redlock %q: stderr", args)
}

// TestUsageErrorOneLine: a usage error says what is wrong on one line and
// where the help is, naming the flag as the user wrote it (issue "first
// hour", item 2: 25 to 60 lines of usage buried the one that mattered);
// --help still prints the whole usage on stdout.
func TestUsageErrorOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--foo", "n", "--", "true"}, "redlock: unknown flag --foo (see redlock run --help)\n"},
		{[]string{"run", "-foo=1", "n", "--", "true"}, "redlock: unknown flag --foo (see redlock run --help)\n"},
		{[]string{"status", "--wait", "1s", "n"}, "redlock: unknown flag --wait (see redlock status --help)\n"},
		{[]string{"run", "n", "--", "true", "--wait"}, ""}, // COMMAND's own flag: not a usage error (no server: 69)
		{[]string{"run", "--wait"}, "redlock: --wait needs a value: a DURATION such as 30s, 10m or 1h30m (see redlock run --help)\n"},
		{[]string{"run", "--grace", "5", "n", "--", "true"}, "redlock: invalid value \"5\" for --grace: want a DURATION such as 30s, 10m or 1h30m (see redlock run --help)\n"},
		{[]string{"run", "--try=maybe", "n", "--", "true"}, "redlock: invalid value \"maybe\" for --try: want true or false (see redlock run --help)\n"},
		{[]string{"unlock", "n", "--owner"}, "redlock: --owner needs a value: OWNER (see redlock unlock --help)\n"},
		{[]string{"frobnicate"}, "redlock: unknown command \"frobnicate\" (see redlock --help)\n"},
		{[]string{"status", "--addr", "foo://x", "n"}, "redlock: --addr \"foo://x\": redis: invalid URL scheme: foo (see redlock status --help)\n"},
	} {
		code, out, stderr := rl(t, []string{"REDIS_URL=redis://" + closedAddr(t)}, tc.args...)
		assert.Empty(t, out, "redlock %q: stdout", tc.args)
		if tc.want == "" {
			assert.NotEqual(t, exitUsage, code, "redlock %q; stderr: %s", tc.args, stderr)
			continue
		}
		assert.Equal(t, exitUsage, code, "redlock %q", tc.args)
		assert.Equal(t, tc.want, stderr, "redlock %q: stderr", tc.args)
	}
	for _, args := range [][]string{{"run", "--help"}, {"status", "-h"}, {"unlock", "--owner", "o", "-help"}, {"help", "run"}} {
		code, out, stderr := rl(t, nil, args...)
		assert.Equal(t, exitOK, code, "redlock %q", args)
		assert.Empty(t, stderr, "redlock %q: stderr", args)
		assert.True(t, strings.HasPrefix(out, "Usage: redlock "), "redlock %q: stdout = %q", args, out)
		assert.Contains(t, out, "\nFlags:\n", "redlock %q: stdout", args)
		assert.Greater(t, strings.Count(out, "\n"), 15, "redlock %q: the whole usage", args)
	}
}

// flagLine is a flag's line in --help: "  --name PLACEHOLDER" (none for a
// bool).
var flagLine = regexp.MustCompile(`(?m)^  --(\w+)(?: (\S+))?$`)

// TestHelpPlaceholders: each flag in --help is written "--name" and
// followed by what its value is, never by a word picked from its
// description (issue "first hour", item 3: "-metadata status").
func TestHelpPlaceholders(t *testing.T) {
	want := map[string]string{
		"addr": "URL", "redlock": "URLs", "prefix": "PREFIX", "timeout": "DURATION",
		"ttl": "DURATION", "wait": "DURATION", "grace": "DURATION", "metadata": "TEXT",
		"try": "", "json": "", "owner": "OWNER", "watch": "",
	}
	for _, cmd := range []string{"run", "status", "unlock", "leader"} {
		code, out, _ := rl(t, nil, cmd, "--help")
		require.Equal(t, exitOK, code)
		lines := flagLine.FindAllStringSubmatch(out, -1)
		require.NotEmpty(t, lines, "%s --help:\n%s", cmd, out)
		// One spelling, as the prose and the errors write it (issue 39,
		// item 4: the flags printed as "-addr").
		assert.NotRegexp(t, `(?m)^ +-\w`, out, "%s --help prints a flag with one dash", cmd)
		for _, m := range lines {
			p, known := want[m[1]]
			if assert.True(t, known, "%s --help: flag -%s not in this test's table", cmd, m[1]) {
				assert.Equal(t, p, m[2], "%s --help: placeholder of -%s", cmd, m[1])
			}
		}
	}
}

// TestFlagsOnlyWhereTheyAct: status and unlock reject --ttl and the other
// flags of run, which would do nothing for them (issue "first hour", item
// 4: "status --ttl 5s" was accepted and ignored); run keeps its own.
func TestFlagsOnlyWhereTheyAct(t *testing.T) {
	srv := redistest.Start(t)
	base := map[string][]string{
		"status": {"status", "--addr", srv.Addr(), "n"},
		"unlock": {"unlock", "--addr", srv.Addr(), "n", "--owner", "o"},
	}
	for _, cmd := range []string{"status", "unlock"} {
		for _, f := range [][]string{{"--ttl", "5s"}, {"--ttl=5s"}, {"-ttl", "5s"}, {"--wait", "1s"}, {"--try"}, {"--grace", "1s"}, {"--metadata", "x"}} {
			args := append(slices.Clone(base[cmd]), f...)
			code, out, stderr := rl(t, nil, args...)
			assert.Equal(t, exitUsage, code, "redlock %q; stderr: %s", args, stderr)
			assert.Empty(t, out, "redlock %q: stdout", args)
			name, _, _ := strings.Cut(strings.TrimLeft(f[0], "-"), "=")
			assert.Equal(t, "redlock: unknown flag --"+name+" (see redlock "+cmd+" --help)\n", stderr, "redlock %q", args)
		}
	}
	for _, f := range []string{"--json", "--owner=o"} {
		code, _, stderr := rl(t, nil, "run", "--addr", srv.Addr(), f, "n", "--", "true")
		assert.Equal(t, exitUsage, code, "run %s; stderr: %s", f, stderr)
	}
	code, _, stderr := rl(t, nil, "run", "--addr", srv.Addr(), "--ttl", "5s", "n", "--", "true")
	assert.Equal(t, exitOK, code, "run --ttl; stderr: %s", stderr)
}
