package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/luasrc"
)

// bareScripts are our acquire and release scripts, read from
// ../internal/scripts (the library's own files, assembled as its NewScript does, by
// internal/luasrc: the functions of _lib.lua they call in front, the default
// fence retention, the reply codes and the key schema's strings written in),
// to be called straight from go-redis: the library's server-side work with
// none of its client-side code around it.
type bareScripts struct{ acquire, release *redis.Script }

func loadBareScripts(tb testing.TB) bareScripts {
	tb.Helper()
	read := func(name string) string {
		src, err := os.ReadFile(filepath.Join("..", name))
		if err != nil {
			tb.Fatal(err)
		}
		return string(src)
	}
	// The reply codes by the names the scripts use, and the default
	// retention, and the key schema's strings, from the library's own Go
	// source (internal/scripts/scripts.go), read rather than imported so
	// that the bench still builds against a REDLOCK_REF of another layout.
	goSrc := read("internal/scripts/scripts.go")
	values := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(Reply\w+)\s*=\s*(-?\d+)`).FindAllStringSubmatch(goSrc, -1) {
		values[m[1]] = m[2]
	}
	codes := map[string]string{}
	for _, m := range regexp.MustCompile(`"(REPLY_\w+)":\s*(\w+)`).FindAllStringSubmatch(goSrc, -1) {
		codes[m[1]] = values[m[2]]
	}
	// The schema's key suffixes and value prefixes, by the names the
	// scripts use (SchemaStrings), from the schema's constants.
	strs := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(\w+(?:Suffix|Prefix|Mark))\s*=\s*("[^"]*")`).FindAllStringSubmatch(goSrc, -1) {
		strs[m[1]] = m[2]
	}
	for _, m := range regexp.MustCompile(`"((?:SUFFIX|PREFIX|VALUE)_\w+)":\s*(\w+)`).FindAllStringSubmatch(goSrc, -1) {
		codes[m[1]] = strs[m[2]]
	}
	hours := regexp.MustCompile(`DefaultFenceRetention = (\d+) \* time\.Hour`).FindStringSubmatch(goSrc)
	if len(codes) == 0 || hours == nil {
		tb.Fatal("bench: cannot read the reply codes or the default fence retention from the library's source")
	}
	h, _ := strconv.Atoi(hours[1])
	retention := strconv.Itoa(h * 3600 * 1000)
	lib := strings.ReplaceAll(read("internal/scripts/_lib.lua"), "DEFAULT_FENCE_RETENTION_MS", retention)
	assemble := func(name string) *redis.Script {
		body := strings.ReplaceAll(read("internal/scripts/"+name), "DEFAULT_FENCE_RETENTION_MS", retention)
		src, err := luasrc.Assemble(lib, body, func(c string) (string, bool) {
			if c == "PUBLISH_COMMAND" { // the library's assemble: PUBLISH off a Cluster
				return `"PUBLISH"`, true
			}
			v, ok := codes[c]
			return v, ok && v != ""
		})
		if err != nil {
			tb.Fatalf("bench: %s: %v", name, err)
		}
		return redis.NewScript(src)
	}
	return bareScripts{acquire: assemble("acquire.lua"), release: assemble("release.lua")}
}

// pair sends what an uncontended Lock + Unlock of name sends: acquire with a
// fresh owner value and a fencing token, then release. With inGoroutine,
// each call runs in a goroutine of its own that the caller waits for on a
// channel, as the library does when the client cannot bound a call itself
// (go-redis defaults).
func (s bareScripts) pair(ctx context.Context, c *redis.Client, name string, inGoroutine bool) error {
	tag := "{" + name + "}"
	owner := uuid.NewString()
	ttl := lockTTL.Milliseconds()
	call := func(f func() error) error {
		if !inGoroutine {
			return f()
		}
		ch := make(chan error, 1)
		go func() { ch <- f() }()
		return <-ch
	}
	if err := call(func() error {
		return s.acquire.Run(ctx, c, []string{tag, tag + ":fence"}, owner, ttl, strconv.FormatInt(time.Now().UnixMicro(), 10)).Err()
	}); err != nil {
		return err
	}
	return call(func() error {
		return s.release.Run(ctx, c, []string{tag, tag + ":released", tag + ":queue", tag + ":waiting"}, owner, ttl).Err()
	})
}

// bareRedlockPair is bareScripts.pair over every server of srvs as a
// Redlock sends it, with none of the library around: a goroutine per server
// sends the acquire (one fencing floor for all), the pair goes on once a
// quorum granted, each goroutine then sends its release, and the pair ends
// once a quorum released; the rest finish in the background, as with
// redsync's WithFailFast. The goroutines are waited for when b ends.
func bareRedlockPair(b *testing.B, srvs []*server) func() error {
	scripts := loadBareScripts(b)
	var clients []*redis.Client
	for _, s := range srvs {
		clients = append(clients, newGoRedis(b, s.Addr(), nil))
	}
	quorum := len(clients)/2 + 1
	tag := "{" + lockName("bare-redlock") + "}"
	keys := []string{tag, tag + ":fence"}
	relKeys := []string{tag, tag + ":released", tag + ":queue", tag + ":waiting"}
	ttl := lockTTL.Milliseconds()
	ctx := context.Background()
	var wg sync.WaitGroup
	b.Cleanup(wg.Wait)
	return func() error {
		owner := uuid.NewString()
		floor := strconv.FormatInt(time.Now().UnixMicro(), 10)
		granted := make(chan bool, len(clients))
		released := make(chan bool, len(clients))
		release := make(chan struct{})
		for _, c := range clients {
			wg.Go(func() {
				_, err := scripts.acquire.Run(ctx, c, keys, owner, ttl, floor).Int64()
				granted <- err == nil
				<-release
				released <- err == nil && scripts.release.Run(ctx, c, relKeys, owner, ttl).Err() == nil
			})
		}
		count := func(ch chan bool) error {
			ok, seen := 0, 0
			for ok < quorum && seen < len(clients) {
				if <-ch {
					ok++
				}
				seen++
			}
			if ok < quorum {
				return fmt.Errorf("bare Redlock: %d of %d servers said yes", ok, len(clients))
			}
			return nil
		}
		err := count(granted)
		close(release) // granted or not: every goroutine goes on and ends
		if err != nil {
			return err
		}
		return count(released)
	}
}
