package bench

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// bareScripts are our acquire and release scripts, read from ../scripts (the
// library's own files, with _lib.lua prepended as the library does), to be
// called straight from go-redis: the library's server-side work with none of
// its client-side code around it.
type bareScripts struct{ acquire, release *redis.Script }

func loadBareScripts(tb testing.TB) bareScripts {
	tb.Helper()
	read := func(name string) string {
		src, err := os.ReadFile(filepath.Join("..", "scripts", name))
		if err != nil {
			tb.Fatal(err)
		}
		return string(src)
	}
	lib := read("_lib.lua")
	return bareScripts{acquire: redis.NewScript(lib + read("acquire.lua")), release: redis.NewScript(lib + read("release.lua"))}
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
		return s.acquire.Run(ctx, c, []string{tag, tag + ":fence"}, owner, ttl, "1", "").Err()
	}); err != nil {
		return err
	}
	return call(func() error {
		return s.release.Run(ctx, c, []string{tag, tag + ":released"}, owner, tag+":rel", ttl).Err()
	})
}
