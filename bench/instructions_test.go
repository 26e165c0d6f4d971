package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ---------------------------------------------------------------------------
// ServerInstructions: the server's instructions per uncontended pair, counted
// by valgrind's callgrind in one redis-server for every row of pairLibs, one
// pair at a time on one goroutine. Unlike CPU time on a shared VM (where the
// same build moves by 2x between runs), an instruction count repeats within
// a few percent, so it is the figure for "what a lock costs the server". It
// counts what the server's process runs in user space: parsing, commands,
// scripts, replies, not the kernel's share of the socket calls.
//
//	cd bench && go test -run '^$' -bench ServerInstructions -benchtime 2000x .
//
// Needs valgrind (with callgrind_control); skips without it. Each row runs
// 100 pairs with counting off first, then b.N counted.

func BenchmarkServerInstructions(b *testing.B) {
	cg := startCallgrindServer(b)
	for _, l := range pairLibs(cg.addr) {
		b.Run(l.name, func(b *testing.B) {
			pair := l.make(b)
			ctx := context.Background()
			name := lockName("instr-" + l.name)
			for range 100 {
				if err := pair(ctx, name); err != nil {
					b.Fatal(err)
				}
			}
			cg.control(b, "-z")
			cg.control(b, "-i", "on")
			for range b.N {
				if err := pair(ctx, name); err != nil {
					b.Fatal(err)
				}
			}
			cg.control(b, "-i", "off")
			b.ReportMetric(float64(cg.dump(b))/float64(b.N), "srv-instr/op")
		})
	}
}

// callgrindServer is a redis-server run under callgrind with counting off
// until callgrind_control turns it on.
type callgrindServer struct {
	addr  string
	pid   int
	dir   string // where callgrind writes its dumps
	dumps int
}

func startCallgrindServer(b *testing.B) *callgrindServer {
	b.Helper()
	for _, bin := range []string{"valgrind", "callgrind_control", "redis-server"} {
		if _, err := exec.LookPath(bin); err != nil {
			b.Skipf("%s not found: the server's instructions need valgrind and redis-server", bin)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := b.TempDir()
	cmd := exec.Command("valgrind", "--tool=callgrind", "--instr-atstart=no",
		"--callgrind-out-file="+filepath.Join(dir, "cg.out"),
		"redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	cg := &callgrindServer{addr: fmt.Sprintf("127.0.0.1:%d", port), pid: cmd.Process.Pid, dir: dir}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	c := redis.NewClient(&redis.Options{Addr: cg.addr})
	defer c.Close()
	for i := 0; ; i++ { // valgrind takes seconds to start the server
		if c.Ping(context.Background()).Err() == nil {
			break
		}
		if i == 300 {
			b.Fatal("redis-server under valgrind did not answer PING within 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return cg
}

func (cg *callgrindServer) control(b *testing.B, args ...string) {
	b.Helper()
	out, err := exec.Command("callgrind_control", append(args, strconv.Itoa(cg.pid))...).CombinedOutput()
	if err != nil {
		b.Fatalf("callgrind_control %v: %v: %s", args, err, out)
	}
}

// dump has callgrind write what it counted since the last zeroing, and
// returns its instructions.
func (cg *callgrindServer) dump(b *testing.B) int64 {
	b.Helper()
	cg.control(b, "-d")
	cg.dumps++
	f, err := os.Open(filepath.Join(cg.dir, fmt.Sprintf("cg.out.%d", cg.dumps)))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "totals: "); ok {
			n, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("no totals in callgrind dump %d", cg.dumps)
	return 0
}
