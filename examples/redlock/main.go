// Command redlock takes a lock over several independent Redis masters with
// the Redlock algorithm: a lock is held once a majority of them granted it.
//
// With no arguments it starts five embedded miniredis instances in this
// process. Give it real masters, one address per independent server, with
// the -addrs flag or the REDIS_ADDRS environment variable (the flag wins):
//
//	go run ./examples/redlock
//	go run ./examples/redlock -addrs 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005
//	REDIS_ADDRS=127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 go run ./examples/redlock
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
)

func main() {
	addrsFlag := flag.String("addrs", "", "comma-separated addresses of independent Redis masters (default: $REDIS_ADDRS, else 5 embedded miniredis)")
	flag.Parse()

	spec, source := *addrsFlag, "-addrs"
	if spec == "" {
		spec, source = os.Getenv("REDIS_ADDRS"), "REDIS_ADDRS"
	}
	var addrs []string
	for a := range strings.SplitSeq(spec, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		for range 5 {
			mr, err := miniredis.Run()
			if err != nil {
				log.Fatal(err)
			}
			defer mr.Close()
			addrs = append(addrs, mr.Addr())
		}
		fmt.Printf("backend: %d embedded miniredis instances in this process (pass -addrs or set REDIS_ADDRS for real servers)\n", len(addrs))
	} else {
		fmt.Printf("backend: %d Redis masters from %s\n", len(addrs), source)
	}

	clients := make([]redlock.Client, len(addrs))
	for i, a := range addrs {
		cl := redis.NewClient(&redis.Options{Addr: a})
		defer cl.Close()
		clients[i] = cl
		fmt.Printf("  master %d: %s\n", i, a)
	}

	rl, err := redlock.NewRedlock(clients, redlock.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	fmt.Printf("a lock needs %d of %d masters\n", len(addrs)/2+1, len(addrs))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	lock, err := rl.Lock(ctx, "example:redlock")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("acquired %q: fencing token %d, valid for another %v\n",
		lock.Name(), lock.Token(), time.Until(lock.Until()).Round(time.Millisecond))

	_, err = rl.TryLock(ctx, "example:redlock")
	switch {
	case errors.Is(err, redlock.ErrNotObtained):
		fmt.Println("a second TryLock is refused while the lock is held (ErrNotObtained)")
	case err == nil:
		fmt.Println("unexpected: a second TryLock was granted while the lock is held")
	default:
		fmt.Println("a second TryLock failed:", err)
	}

	if err := lock.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released; Err() now says:", lock.Err())

	// Do holds the lock, renewed by the watchdog, while the function runs,
	// cancels the function's context if the lock is lost, and always releases.
	err = rl.Do(ctx, "example:redlock", func(ctx context.Context) error {
		fmt.Println("working under the lock inside Do")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("Do returned nil; the lock is released")
}
