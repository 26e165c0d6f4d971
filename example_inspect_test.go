package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/redlockgo/redlock"
)

func ExampleLocker_Inspect() {
	client, stop := newClient()
	defer stop()
	locker, err := redlock.NewLocker(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	ctx := context.Background()

	lock, err := locker.Lock(ctx, "deploy")
	if err != nil {
		log.Fatal(err)
	}
	h, err := locker.Inspect(ctx, "deploy")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", h.Held, "by this lock:", h.Owner == lock.Owner(), "token:", h.Token == lock.Token(), "lease left:", h.TTL > 0)

	if err := lock.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	h, err = locker.Inspect(ctx, "deploy")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", h.Held, "last token kept:", h.Token == lock.Token())
	// Output:
	// held: true by this lock: true token: true lease left: true
	// held: false last token kept: true
}

func ExampleLocker_Release() {
	client, stop := newClient()
	defer stop()
	locker, err := redlock.NewLocker(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	ctx := context.Background()

	// A holder somewhere is stuck; an operator knows its owner value, from
	// Inspect (or `redlock status`).
	stuck, err := locker.Lock(ctx, "deploy", redlock.WithAutoRenew(false))
	if err != nil {
		log.Fatal(err)
	}
	h, err := locker.Inspect(ctx, "deploy")
	if err != nil {
		log.Fatal(err)
	}

	err = locker.Release(ctx, "deploy", "some-other-owner")
	fmt.Println("wrong owner:", errors.Is(err, redlock.ErrNotHeld))
	fmt.Println("by its owner:", locker.Release(ctx, "deploy", h.Owner))
	fmt.Println("the stuck holder's Unlock:", errors.Is(stuck.Unlock(ctx), redlock.ErrNotHeld))
	// Output:
	// wrong owner: true
	// by its owner: <nil>
	// the stuck holder's Unlock: true
}
