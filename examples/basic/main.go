// Command basic takes a lock, does some work under it, and releases it.
//
// It runs against an embedded miniredis by default, or against the Redis
// server at REDIS_ADDR (for example REDIS_ADDR=127.0.0.1:6379).
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

func main() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		defer mr.Close()
		addr = mr.Addr()
		fmt.Println("using an embedded miniredis at", addr, "(set REDIS_ADDR to use a real server)")
	} else {
		fmt.Println("using the Redis server at", addr)
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()

	locker, err := redlock.NewLocker(client, redlock.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	ctx := context.Background()

	lock, err := locker.Lock(ctx, "example:report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("acquired %q with fencing token %d, valid for %v\n",
		lock.Name(), lock.Token(), time.Until(lock.Until()).Round(time.Millisecond))

	// A second attempt while it is held fails at once.
	if _, err := locker.TryLock(ctx, "example:report"); errors.Is(err, redlock.ErrNotObtained) {
		fmt.Println("a second TryLock is refused while the lock is held")
	}
	if err := lock.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released; Err() now says:", lock.Err())

	// Do holds the lock (renewed by the watchdog) while the function runs and
	// cancels its context if the lock is lost.
	err = locker.Do(ctx, "example:report", func(ctx context.Context) error {
		fmt.Println("working under the lock inside Do")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("Do returned; the lock is released")
}
