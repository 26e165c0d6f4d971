package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
)

func ExampleNewRedlock() {
	// Three independent masters: no replication between them, each its
	// own server. Embedded miniredis here; real code passes one client per
	// master.
	var clients []redlock.Client
	for range 3 {
		mr, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		defer mr.Close()
		client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		defer client.Close()
		clients = append(clients, client)
	}

	rl, err := redlock.NewRedlock(clients) // a lock needs 2 of the 3
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	ctx := context.Background()

	lock, err := rl.Lock(ctx, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", lock.Name(), lock.Err() == nil, "token > 0:", lock.Token() > 0)

	_, err = rl.TryLock(ctx, "invoice:42")
	fmt.Println("second TryLock refused:", errors.Is(err, redlock.ErrNotObtained))

	if err := lock.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after Unlock:", errors.Is(lock.Err(), redlock.ErrReleased))
	// Output:
	// held: invoice:42 true token > 0: true
	// second TryLock refused: true
	// after Unlock: true
}
