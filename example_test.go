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

// newClient returns a client to an embedded miniredis for the examples; use
// your own *redis.Client (or ClusterClient, or Ring) in real code.
func newClient() (*redis.Client, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return client, func() { client.Close(); mr.Close() }
}

func ExampleLocker_Lock() {
	client, stop := newClient()
	defer stop()
	locker, err := redlock.NewLocker(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	ctx := context.Background()

	lock, err := locker.Lock(ctx, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", lock.Name(), lock.Err() == nil)

	_, err = locker.TryLock(ctx, "invoice:42")
	fmt.Println("second TryLock refused:", errors.Is(err, redlock.ErrNotObtained))

	if err := lock.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after Unlock:", lock.Err())
	// Output:
	// held: invoice:42 true
	// second TryLock refused: true
	// after Unlock: redlock: lock released
}

func ExampleLocker_Do() {
	client, stop := newClient()
	defer stop()
	locker, err := redlock.NewLocker(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	err = locker.Do(context.Background(), "nightly-report", func(ctx context.Context) error {
		// ctx is cancelled if the lock is lost while this runs, and carries
		// the lock, whose token goes with every write to the resource.
		lock, _ := redlock.FromContext(ctx)
		fmt.Println("building the report under the lock, token > 0:", lock.Token() > 0)
		return nil
	})
	fmt.Println("Do:", err)
	// Output:
	// building the report under the lock, token > 0: true
	// Do: <nil>
}

func ExampleLock_Token() {
	client, stop := newClient()
	defer stop()
	locker, err := redlock.NewLocker(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	ctx := context.Background()

	var fence redlock.Fence // lives with the resource, not with the lock
	first, err := locker.Lock(ctx, "ledger")
	if err != nil {
		log.Fatal(err)
	}
	// Suppose the first holder stalls past its lease and the lock moves on.
	if err := first.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	second, err := locker.Lock(ctx, "ledger")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("second holder admitted:", fence.Admit(second.Token()) == nil)
	err = fence.Admit(first.Token())
	fmt.Println("stale first holder rejected:", errors.Is(err, redlock.ErrStaleToken))
	// Output:
	// second holder admitted: true
	// stale first holder rejected: true
}
