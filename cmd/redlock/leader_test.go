package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock"
	"github.com/redlockgo/redlock/internal/redistest"
)

func TestLeader(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	code, out, _ := rl(t, nil, "leader", "--addr", srv.Addr(), "sched")
	assert.Equal(t, exitFree, code, "leader of an election nobody leads")
	assert.Contains(t, out, "leader: false\n")

	lk, err := redlock.NewLocker(srv.Client(t))
	require.NoError(t, err)
	defer lk.Close()
	e := lk.Election("sched")
	lead, err := e.Campaign(ctx, "host-a:8080")
	require.NoError(t, err)

	code, out, stderr := rl(t, nil, "leader", "sched", "--addr", srv.Addr())
	assert.Equal(t, exitOK, code, "stderr: %s", stderr)
	assert.Contains(t, out, "value: host-a:8080\n")
	assert.Contains(t, out, fmt.Sprintf("term: %d\n", lead.Token()))
	assert.Regexp(t, `(?m)^ttl: \d+(\.\d+)?m?s$`, out)

	code, out, _ = rl(t, nil, "leader", "sched", "--json", "--addr", srv.Addr())
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, fmt.Sprintf(`"leader":true,"value":"host-a:8080","term":%d`, lead.Token()))
	assert.Equal(t, 1, strings.Count(out, "\n"), "--json prints one line")
	require.NoError(t, lead.Unlock(ctx))
}

func TestLeaderWatch(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	lk, err := redlock.NewLocker(srv.Client(t))
	require.NoError(t, err)
	defer lk.Close()
	e := lk.Election("watched")
	first, err := e.Campaign(ctx, "a")
	require.NoError(t, err)

	p := start(t, nil, "", "leader", "--watch", "--addr", srv.Addr(), "watched")
	// Observe sends its first leader once it is subscribed: from this line
	// on, every change is heard.
	waitFor(t, p.stdout, func(s string) bool { return strings.Contains(s, fmt.Sprintf(`term=%d `, first.Token())) })
	require.NoError(t, e.Proclaim(ctx, first, "a2"))
	waitFor(t, p.stdout, func(s string) bool { return strings.Contains(s, `value="a2"`) })
	require.NoError(t, first.Unlock(ctx))
	waitFor(t, p.stdout, func(s string) bool { return strings.Contains(s, "term=0 ") })
	second, err := e.Campaign(ctx, "b")
	require.NoError(t, err)
	out := waitFor(t, p.stdout, func(s string) bool { return strings.Contains(s, fmt.Sprintf(`term=%d `, second.Token())) })
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, "one line per change: %q", out)
	assert.Contains(t, lines[0], `value="a"`)
	assert.Contains(t, lines[1], `value="a2"`)
	assert.Contains(t, lines[3], `value="b"`)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, exitOK, p.wait(t, longWait))
	require.NoError(t, second.Unlock(ctx))
}

// TestLeaderWatchCutOff: leader --watch whose link to Redis goes silent (a
// black hole: no error reaches it) prints term=0, "not known", once the
// leader's lease it last read has run out, instead of the leader it last
// saw; once the link heals it prints the leader elected meanwhile.
func TestLeaderWatchCutOff(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	ctx := context.Background()
	lk, err := redlock.NewLocker(srv.Client(t), redlock.WithTTL(2*time.Second))
	require.NoError(t, err)
	defer lk.Close()
	e := lk.Election("cut-off")
	first, err := e.Campaign(ctx, "a")
	require.NoError(t, err)

	p := start(t, nil, "", "leader", "--watch", "--addr", proxy.Addr(), "cut-off")
	waitFor(t, p.stdout, func(s string) bool { return strings.Contains(s, fmt.Sprintf(`term=%d `, first.Token())) })
	proxy.Blackhole(true)
	require.NoError(t, first.Unlock(ctx))
	second, err := e.Campaign(ctx, "b")
	require.NoError(t, err)
	defer second.Unlock(ctx)
	waitFor(t, p.stdout, func(s string) bool { return strings.Contains(s, "term=0 ") })
	proxy.Blackhole(false)
	out := waitFor(t, p.stdout, func(s string) bool { return strings.Contains(s, fmt.Sprintf(`term=%d `, second.Token())) })
	assert.Contains(t, out, `value="b"`)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, exitOK, p.wait(t, longWait))
}
