package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/redlockgo/redlock"
)

func ExampleRedisFence() {
	client, stop := newClient()
	defer stop()
	locker, err := redlock.NewLocker(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	// The guarded data may live on another Redis than the locks; one
	// server is enough for the example.
	fence, err := redlock.NewRedisFence(client)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	// The first holder registers its token before it reads the balance...
	first, err := locker.Lock(ctx, "account:1")
	if err != nil {
		log.Fatal(err)
	}
	if err := fence.Admit(ctx, "balance:1", first.Token()); err != nil {
		log.Fatal(err)
	}
	// ...and then stalls past its lease: here the lock simply moves on.
	if err := first.Unlock(ctx); err != nil {
		log.Fatal(err)
	}

	second, err := locker.Lock(ctx, "account:1")
	if err != nil {
		log.Fatal(err)
	}
	defer second.Unlock(ctx)
	if err := fence.Admit(ctx, "balance:1", second.Token()); err != nil {
		log.Fatal(err)
	}
	err = fence.Set(ctx, "balance:1", second.Token(), 110, 0)
	fmt.Println("second holder's write admitted:", err == nil)

	// The first holder wakes up and writes what it computed before.
	err = fence.Set(ctx, "balance:1", first.Token(), 50, 0)
	fmt.Println("stale write rejected:", errors.Is(err, redlock.ErrStaleToken))
	var stale *redlock.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Println("a higher token was admitted:", stale.Highest > stale.Token)
	}

	balance, err := client.Get(ctx, "balance:1").Result()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance:", balance)
	// Output:
	// second holder's write admitted: true
	// stale write rejected: true
	// a higher token was admitted: true
	// balance: 110
}
