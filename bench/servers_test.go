package bench

import (
	"os"
	"sync"
	"testing"

	"github.com/redlockgo/redlock/internal/redistest"
)

// server is one redis-server process started by the benchmarks through the
// library's test kit: 127.0.0.1 only, a free port, persistence off, killed
// with the benchmark binary.
type server = redistest.Server

var (
	serversMu sync.Mutex
	servers   []*server // every server started, stopped by TestMain
	pool      = map[string][]*server{}
)

// getServers returns n servers for the group name, started on first use and
// shared by every benchmark that asks for the same group, so that the
// libraries compared side by side run against the same processes. It skips
// when redis-server is not installed.
func getServers(tb testing.TB, group string, n int) []*server {
	tb.Helper()
	redistest.RequireRedisServer(tb)
	serversMu.Lock()
	defer serversMu.Unlock()
	if s := pool[group]; len(s) == n {
		return s
	}
	var got []*server
	for range n {
		// Warnings only: the benchmarks' output is their figures.
		s, err := redistest.Launch("--loglevel", "warning")
		if err != nil {
			tb.Fatalf("starting redis-server: %v", err)
		}
		servers = append(servers, s)
		got = append(got, s)
	}
	pool[group] = got
	return got
}

// stopAll kills every server started; TestMain calls it after the run.
func stopAll() {
	serversMu.Lock()
	defer serversMu.Unlock()
	for _, s := range servers {
		_ = s.Stop()
	}
	servers, pool = nil, map[string][]*server{}
}

func TestMain(m *testing.M) {
	code := m.Run()
	stopAll()
	os.Exit(code)
}
