// Command basic is the README's quick start: it takes a lock, works under
// it with its fencing token, and releases it.
//
// It runs on an embedded miniredis by default, or on the Redis server at
// REDIS_ADDR (for example REDIS_ADDR=127.0.0.1:6379).
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
)

func main() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		mr, err := miniredis.Run() // an embedded server, for trying it out
		if err != nil {
			log.Fatal(err)
		}
		defer mr.Close()
		addr = mr.Addr()
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()

	locker, err := redlock.NewLocker(client) // lease 10s, renewed in the background
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	ctx := context.Background()

	// Do holds the lock while the function runs; its ctx is cancelled if
	// the lock is lost, and Do returns an error matching ErrLost then.
	err = locker.Do(ctx, "nightly-report", func(ctx context.Context) error {
		lock, _ := redlock.FromContext(ctx)
		fmt.Println("holding", lock.Name(), "with fencing token", lock.Token())
		return nil // send lock.Token() with every write to the resource
	})
	if err != nil {
		log.Fatal(err)
	}

	// By hand: Lock waits, TryLock makes one attempt, Unlock releases.
	lock, err := locker.Lock(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := locker.TryLock(ctx, "nightly-report"); errors.Is(err, redlock.ErrNotObtained) {
		fmt.Println("a second TryLock is refused:", err)
	}
	if err := lock.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", lock.Err())
}
