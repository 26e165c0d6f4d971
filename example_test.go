package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

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

func ExampleLocker_TryLock() {
	client, stop := newClient()
	defer stop()
	ctx := context.Background()

	// Two Lockers on one Redis stand for two processes.
	other, err := redlock.NewLocker(client)
	if err != nil {
		log.Fatal(err)
	}
	defer other.Close()
	locker, err := redlock.NewLocker(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	held, err := other.Lock(ctx, "cron:cleanup")
	if err != nil {
		log.Fatal(err)
	}
	defer held.Unlock(ctx)

	// One attempt, no wait: a cron job skips its run while another holds it.
	_, err = locker.TryLock(ctx, "cron:cleanup")
	fmt.Println("not obtained:", errors.Is(err, redlock.ErrNotObtained))
	var taken *redlock.TakenError
	if errors.As(err, &taken) {
		fmt.Println("held by the other owner:", taken.Owner == held.Owner(), "lease left:", taken.TTL > 0)
	}
	// Output:
	// not obtained: true
	// held by the other owner: true lease left: true
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

// printObserver prints what it sees; embed NopObserver and implement the
// events you need.
type printObserver struct{ redlock.NopObserver }

func (printObserver) OnAcquire(e redlock.AcquireEvent) {
	fmt.Println("acquire", e.Name, e.Outcome, "contended:", e.Contended)
}

func (printObserver) OnRelease(e redlock.ReleaseEvent) {
	fmt.Println("release", e.Name, "err:", e.Err)
}

func (printObserver) OnLoss(e redlock.LossEvent) {
	fmt.Println("lost", e.Name, "reason:", e.Err.Reason)
}

func ExampleWithObserver() {
	client, stop := newClient()
	defer stop()
	locker, err := redlock.NewLocker(client, redlock.WithObserver(printObserver{}))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	lock, err := locker.TryLock(ctx, "invoice:7")
	if err != nil {
		log.Fatal(err)
	}
	_, err = locker.TryLock(ctx, "invoice:7")
	var taken *redlock.TakenError
	fmt.Println("held by our first lock:", errors.As(err, &taken) && taken.Owner == lock.Owner())
	if err := lock.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := locker.TryLock(ctx, "invoice:8"); err != nil {
		log.Fatal(err)
	}
	locker.Close() // releases invoice:8 under its holder: a loss
	// Output:
	// acquire invoice:7 acquired contended: false
	// acquire invoice:7 contended contended: true
	// held by our first lock: true
	// release invoice:7 err: <nil>
	// acquire invoice:8 acquired contended: false
	// lost invoice:8 reason: closed
}

func ExampleLostError() {
	client, stop := newClient()
	defer stop()
	locker, err := redlock.NewLocker(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	ctx := context.Background()

	err = locker.Do(ctx, "payout", func(ctx context.Context) error {
		lock, _ := redlock.FromContext(ctx)
		client.Set(ctx, lock.Key(), "another-owner", 0) // someone takes the lock
		_ = lock.Extend(ctx, time.Second)               // finds it taken: the lock is lost
		<-ctx.Done()                                    // the work stops when the lock is lost
		return nil
	})
	var lost *redlock.LostError
	if errors.As(err, &lost) {
		fmt.Println("lost:", lost.Reason, errors.Is(err, redlock.ErrLost))
	}
	// Output:
	// lost: taken true
}
