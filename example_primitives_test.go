package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/redlockgo/redlock"
)

func ExampleLocker_RLock() {
	client, stop := newClient()
	defer stop()
	locker, err := redlock.NewLocker(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	ctx := context.Background()

	// Any number of readers at once.
	r1, err := locker.RLock(ctx, "catalog")
	if err != nil {
		log.Fatal(err)
	}
	r2, err := locker.RLock(ctx, "catalog")
	if err != nil {
		log.Fatal(err)
	}
	h, err := locker.Inspect(ctx, "catalog")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("readers:", h.Readers)

	// The writer is the ordinary lock on the same name: not while readers hold.
	_, err = locker.TryLock(ctx, "catalog")
	fmt.Println("writer refused:", errors.Is(err, redlock.ErrNotObtained))

	_ = r1.Unlock(ctx)
	_ = r2.Unlock(ctx)
	w, err := locker.TryLock(ctx, "catalog")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("writer holds, token > 0:", w.Token() > 0)
	_, err = locker.TryRLock(ctx, "catalog")
	fmt.Println("reader refused:", errors.Is(err, redlock.ErrNotObtained))
	_ = w.Unlock(ctx)
	// Output:
	// readers: 2
	// writer refused: true
	// writer holds, token > 0: true
	// reader refused: true
}

func ExampleSemaphore() {
	client, stop := newClient()
	defer stop()
	locker, err := redlock.NewLocker(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	ctx := context.Background()

	// At most two exports at once, across every process using the name.
	sem, err := locker.Semaphore("exports", 2)
	if err != nil {
		log.Fatal(err)
	}
	a, err := sem.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	b, err := sem.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_, err = sem.TryAcquire(ctx)
	fmt.Println("third refused:", errors.Is(err, redlock.ErrNotObtained))

	// Each permit is a lease of its own: renewed, lost and released alone.
	_ = a.Unlock(ctx)
	c, err := sem.TryAcquire(ctx)
	fmt.Println("after a release:", err == nil)
	_ = b.Unlock(ctx)
	_ = c.Unlock(ctx)
	// Output:
	// third refused: true
	// after a release: true
}

func ExampleLocker_LockAll() {
	client, stop := newClient()
	defer stop()
	locker, err := redlock.NewLocker(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	ctx := context.Background()

	// A transfer holds both accounts, whatever order the caller names them in.
	lock, err := locker.LockAll(ctx, []string{"account:7", "account:3"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holds:", lock.Names())

	_, err = locker.TryLock(ctx, "account:7")
	fmt.Println("each name is taken:", errors.Is(err, redlock.ErrNotObtained))

	if err := lock.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// holds: [account:3 account:7]
	// each name is taken: true
}
