//go:build unix

package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/redlockgo/redlock/internal/redistest"
)

// TestReplicaSaysSo: every command pointed at a replica says it is one
// (issue 39, item 4): status and leader show the replica's copy and say on
// stderr that it may lag; unlock refuses (it said "not held by owner",
// since the release it cannot run looks like a key that is not ours); a
// Redlock given a replica next to masters says "replica", not "same
// server".
func TestReplicaSaysSo(t *testing.T) {
	pair := redistest.StartPair(t)
	replica := pair.Replica.Addr()
	for _, args := range [][]string{
		{"status", "--addr", replica, "n"},
		{"leader", "--addr", replica, "n"},
	} {
		code, out, stderr := rl(t, nil, args...)
		assert.Equal(t, exitFree, code, "redlock %q on a replica; stderr: %s", args, stderr)
		assert.NotEmpty(t, out, "redlock %q on a replica: what its copy says", args)
		errorLine(t, stderr, args[0]+" n", replica+" is a replica of ", "--addr should name the master")
	}

	code, out, stderr := rl(t, nil, "unlock", "--addr", replica, "n", "--owner", "o")
	assert.Equal(t, exitUnavailable, code, "unlock on a replica; stderr: %s", stderr)
	assert.Empty(t, out)
	errorLine(t, stderr, "unlock n", replica+" is a replica of ", "READONLY", "--addr must name a master")
	assert.NotContains(t, stderr, "not held")

	other := redistest.Start(t)
	nodes := strings.Join([]string{pair.Master.Addr(), replica, other.Addr()}, ",")
	for _, cmd := range []string{"status", "unlock", "run"} {
		args := map[string][]string{
			"status": {"status", "--redlock", nodes, "n"},
			"unlock": {"unlock", "--redlock", nodes, "n", "--owner", "o"},
			"run":    {"run", "--redlock", nodes, "n", "--", "true"},
		}[cmd]
		code, out, stderr := rl(t, nil, args...)
		assert.Equal(t, exitUsage, code, "redlock %q; stderr: %s", args, stderr)
		assert.Empty(t, out)
		usageLine(t, stderr, args)
		assert.Contains(t, stderr, "--redlock: "+replica+" is a replica of ", "redlock %q", args)
		assert.Contains(t, stderr, "a Redlock needs independent masters", "redlock %q", args)
		assert.NotContains(t, stderr, "same server", "redlock %q", args)
	}
}
