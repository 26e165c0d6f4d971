package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/redlockgo/redlock"
)

func ExampleElection() {
	client, stop := newClient()
	defer stop()
	locker, err := redlock.NewLocker(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	ctx := context.Background()
	e := locker.Election("scheduler")

	_, err = e.Leader(ctx)
	fmt.Println("before any campaign:", errors.Is(err, redlock.ErrNoLeader))

	// Campaign waits until this caller leads; the value is what followers
	// see (an address, a host name).
	lead, err := e.Campaign(ctx, "127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	l, err := e.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", l.Value, "term is the lock's token:", l.Term == lead.Token())

	// A follower observes: the current leader first, then every change,
	// pushed by Redis.
	octx, cancel := context.WithCancel(ctx)
	changes := e.Observe(octx)
	first := <-changes
	fmt.Println("observed:", first.Value)

	if err := e.Proclaim(ctx, lead, "127.0.0.1:9090"); err != nil {
		log.Fatal(err)
	}
	moved := <-changes
	fmt.Println("observed:", moved.Value, "same term:", moved.Term == first.Term)

	// Unlock resigns: Term 0 says nobody leads.
	if err := lead.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after resigning, term:", (<-changes).Term)

	next, err := e.Campaign(ctx, "127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	defer next.Unlock(ctx)
	l = <-changes
	fmt.Println("observed:", l.Value, "higher term:", l.Term > first.Term)

	cancel()
	for range changes { // drained and closed once octx has ended
	}
	// Output:
	// before any campaign: true
	// leader: 127.0.0.1:8080 term is the lock's token: true
	// observed: 127.0.0.1:8080
	// observed: 127.0.0.1:9090 same term: true
	// after resigning, term: 0
	// observed: 127.0.0.1:7070 higher term: true
}

func ExampleFence() {
	client, stop := newClient()
	defer stop()
	locker, err := redlock.NewLocker(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	ctx := context.Background()
	// The guard in front of a resource of this process; the zero value is
	// ready to use.
	var fence redlock.Fence

	first, err := locker.Lock(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}
	// Register the token when the critical section starts...
	fmt.Println("first holder admitted:", fence.Admit(first.Token()) == nil)
	// ...then stall: here the lock simply moves on to a second holder.
	if err := first.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	second, err := locker.Lock(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}
	defer second.Unlock(ctx)
	fmt.Println("second holder admitted:", fence.Admit(second.Token()) == nil)

	// The first holder wakes up and tries again: refused.
	err = fence.Admit(first.Token())
	fmt.Println("first holder refused:", errors.Is(err, redlock.ErrStaleToken))
	fmt.Println("highest admitted is the second's:", fence.Highest() == second.Token())
	// Output:
	// first holder admitted: true
	// second holder admitted: true
	// first holder refused: true
	// highest admitted is the second's: true
}
