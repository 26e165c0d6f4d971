// Command fencing shows why a lock needs fencing tokens, and how to use them.
//
// Two workers update one account balance under a lock with a short lease.
// The first takes the lock, reads the balance, and then stalls (as a GC pause
// or a swapped-out process would) until its lease has run out. The second
// takes the lock, reads, and writes. Then the first wakes up and writes the
// balance it computed before the stall. Its write goes through a RedisFence,
// which rejects it: the token it carries is older than the second worker's.
//
// The program exits with status 1 if a stale write ever got through. It runs
// against an embedded miniredis by default, or against the Redis server at
// REDIS_ADDR (for example REDIS_ADDR=127.0.0.1:6379).
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
)

const (
	lease   = 300 * time.Millisecond
	account = "example:balance"
)

func main() {
	client, stop := connect()
	defer stop()
	ctx := context.Background()

	locker, err := redlock.NewLocker(client, redlock.WithTTL(lease), redlock.WithAutoRenew(false))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	guard, err := redlock.NewRedisFence(client)
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Set(ctx, account, 100, 0).Err(); err != nil {
		log.Fatal(err)
	}

	// Worker 1 takes the lock and registers its token before reading, so a
	// later holder's registration makes this token stale.
	w1, err := locker.Lock(ctx, "account")
	if err != nil {
		log.Fatal(err)
	}
	if err := guard.Admit(ctx, account, w1.Token()); err != nil {
		log.Fatal(err)
	}
	seen1 := balance(ctx, client)
	fmt.Printf("worker 1: lock taken (token %d), balance %d; now stalls\n", w1.Token(), seen1)

	// The stall: worker 1 does nothing until its lease is over. A real process
	// would not even know; Done tells this one, but it ignores it.
	<-w1.Done()
	fmt.Println("worker 1: (stalled) lease expired:", w1.Err())

	w2, err := locker.Lock(ctx, "account")
	if err != nil {
		log.Fatal(err)
	}
	if err := guard.Admit(ctx, account, w2.Token()); err != nil {
		log.Fatal(err)
	}
	seen2 := balance(ctx, client)
	if err := guard.Set(ctx, account, w2.Token(), seen2+10, 0); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("worker 2: lock taken (token %d), balance %d -> %d\n", w2.Token(), seen2, seen2+10)
	if err := w2.Unlock(ctx); err != nil {
		log.Fatal(err)
	}

	// Worker 1 wakes up and writes what it computed before the stall.
	err = guard.Set(ctx, account, w1.Token(), seen1-50, 0)
	staleLanded := err == nil
	switch {
	case errors.Is(err, redlock.ErrStaleToken):
		fmt.Println("worker 1: wakes, writes", seen1-50, "-> rejected:", err)
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("worker 1: wakes, writes", seen1-50, "-> ACCEPTED (stale write!)")
	}

	final := balance(ctx, client)
	fmt.Println("final balance:", final)
	if staleLanded || final != 110 {
		fmt.Println("FAIL: a stale write got through")
		os.Exit(1)
	}
	fmt.Println("OK: the stale write was rejected; worker 2's update stands")
}

func balance(ctx context.Context, client *redis.Client) int {
	n, err := client.Get(ctx, account).Int()
	if err != nil {
		log.Fatal(err)
	}
	return n
}

// connect returns a client to REDIS_ADDR, or to an embedded miniredis whose
// clock is advanced in step with real time (miniredis expires keys only when
// told that time has passed, and this example needs a lease to run out).
func connect() (*redis.Client, func()) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		fmt.Println("using the Redis server at", addr)
		client := redis.NewClient(&redis.Options{Addr: addr})
		return client, func() { client.Close() }
	}
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("using an embedded miniredis (set REDIS_ADDR to use a real server)")
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-quit:
				return
			case now := <-t.C:
				mr.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return client, func() { client.Close(); close(quit); <-done; mr.Close() }
}
