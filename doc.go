// Package redlock provides distributed locks on Redis: a [Locker] for one
// Redis deployment and a [Redlock] over N independent masters, with fencing
// tokens, a watchdog that renews held locks and reports their loss in time,
// and resource-side guards ([Fence], [RedisFence]) that reject stale writes.
//
// # Use
//
//	locker, err := redlock.NewLocker(client) // *redis.Client, *redis.ClusterClient, *redis.Ring
//	...
//	err = locker.Do(ctx, "report", func(ctx context.Context) error {
//		// ctx is cancelled the moment the lock is lost.
//		return build(ctx)
//	})
//
// or, by hand:
//
//	lock, err := locker.Lock(ctx, "report")
//	if err != nil { ... }
//	defer lock.Unlock(ctx)
//	select {
//	case <-lock.Done(): // lost: stop touching the resource
//	...
//	}
//
// # Documentation
//
// The README has the quick start; these pages have the rest:
//
//   - What the lock guarantees, fencing, errors:
//     https://github.com/redlockgo/redlock/blob/main/docs/guarantees.md
//   - Recipes (timeouts, worker pools, cron, read-write locks, semaphores,
//     testing): https://github.com/redlockgo/redlock/blob/main/docs/recipes.md
//   - Leader election: https://github.com/redlockgo/redlock/blob/main/docs/election.md
//   - Operations (options, an unreachable Redis, Inspect and Release,
//     observability): https://github.com/redlockgo/redlock/blob/main/docs/operations.md
//   - The redlock command: https://github.com/redlockgo/redlock/blob/main/docs/cli.md
//   - Coming from redsync or bsm/redislock:
//     https://github.com/redlockgo/redlock/blob/main/docs/migration.md
//
// # How a lock is held
//
// Acquiring is one round trip: a script sets the lock key to a fresh random
// owner value (a UUID) with SET NX PX and, in the same step, mints the fencing
// token. Unlock and Extend are scripts that act only while the key still holds
// that owner value, so a stale handle can never release or extend someone
// else's lock, and an expired lock is never re-created. Every call to Redis is
// bounded by the library itself, whatever the client's timeouts.
//
// [Lock.Until] is the end of local validity: the instant before the request
// was sent, plus the TTL, minus a drift allowance (TTL*0.01 + 2ms). The key
// lives on the server at least until then, so no one else can be granted the
// name before Until. [Lock.Done] closes by Until, driven by one loss clock
// per Locker that fires ahead of it (1ms plus half the drift allowance), and
// [Lock.Err] compares the clock with Until whenever it is called. With
// auto-renew (the default) a single watchdog goroutine per Locker renews
// every held lock at TTL/3; a lock whose renewal does not succeed in time is
// lost: Done closes and [Lock.Err] returns [ErrLost]. A Redlock's calls all
// settle as soon as a quorum of masters answered, so a hung minority costs
// nothing.
//
// # What the lock guarantees, and what it does not
//
// On one healthy Redis node, at most one holder's Until lies in the future at
// any time, provided the processes' clocks run at about the same rate (the
// drift allowance covers 1%). That is the whole promise. It breaks when:
//
//   - Redis loses the key: a failover to a replica that had not received it
//     (replication is asynchronous), or a restart without persistence. A
//     second client can then acquire while the first still believes it holds
//     the lock.
//   - The holder pauses (GC, swap, SIGSTOP, a slow network) after checking
//     its lock and before touching the resource: it acts after its lease.
//   - A server clock jumps forward: Redis expires keys by wall clock.
//
// [Redlock] survives the loss or crash of a minority of masters, but not
// pauses or clock jumps. No lease-based lock can prevent a paused holder from
// acting late; only the resource can refuse it. That is what fencing tokens
// are for.
//
// # Fencing tokens
//
// Every acquisition gets a token ([Lock.Token]) that is strictly larger than
// every earlier token for the name. The resource records the highest token
// it has seen and refuses anything older: a stale holder's write is rejected
// no matter how late it arrives. Register the token when the critical section
// starts ([Fence.Admit] or [RedisFence.Admit]), then send it with every write.
//
// Tokens are minted as max(counter+1, time in microseconds), on the clock of
// the client that takes the lock (for a [Redlock] one floor for all masters,
// so they agree). A plain counter would be lost together with the lock (the
// two failures above) and the next token would go backwards; the time floor
// keeps it ahead as long as the taker's clock is not behind the one that
// floored the last token by more than the time since that grant. The counter lives in one
// key per lock name, kept for a retention after the name's last grant
// ([WithFenceRetention], default 24h): after it expires the next token is
// the clock alone, still larger unless that clock went back by the
// retention or more. Turn fencing off with [WithFencing] to save the key.
// See [Redlock] for what holds across masters.
//
// # Losses, observability, tests
//
// A lost lock says why: [Lock.Err] (and the cause of Do's context) is a
// [*LostError] whose [LossReason] tells expiry, another owner, a deleted
// key, a lost quorum, Close and [WithMaxHold] apart. [WithObserver] reports
// acquisitions, renewals, releases, losses and node failures to hooks; the
// module github.com/redlockgo/redlock/otel turns them into OpenTelemetry
// metrics and spans. Package redlocktest runs a Locker on an embedded
// miniredis and breaks its locks on demand, for tests of loss handling.
//
// # More than one mutex
//
// A [Locker] also gives a read-write lock ([Locker.RLock]: many readers or
// one writer, the writer being the ordinary lock, with writer preference), a
// counting semaphore ([Locker.Semaphore]) whose permits are leases, and
// all-or-nothing locks on several names ([Locker.LockAll]). Each hold is a
// *Lock like any other. A [Redlock] offers the exclusive lock only, and the
// leader elections built on it ([Redlock.Election]).
//
// # Keys
//
// A lock named n lives at "{redlock:n}", its counter at "{redlock:n}:fence"
// (the prefix is [WithKeyPrefix]). A release renames the lock key to
// "{redlock:n}:released", keeping the released owner for what was left of
// the lease, so that a release retried after a lost reply knows it already
// succeeded. Read holds live in the sorted set "{redlock:n}:readers" (the
// lock key then holds a mark, so that writers are refused), a caller that
// waits marks "{redlock:n}:waiting" (a release publishes only then), a
// semaphore's permits in "{redlock:n}:sem" (their
// number in "{redlock:n}:sem:permits", their counter in
// "{redlock:n}:sem:fence"), metadata in "{redlock:n}:meta", and the queue of
// waiting writers (a Locker's fair hand-off across processes) in the sorted
// set "{redlock:n}:queue". All share a hash tag, so they sit in one Redis
// Cluster slot, and every script passes each key it touches in KEYS, as
// Redis Cluster requires. Releases are
// published on "{redlock:n}:rel". Every one of these keys expires: with the
// lease, 5s after a waiting writer's last attempt, and the counters after
// the retention of [WithFenceRetention], so a name no longer used leaves
// nothing behind. The marks of a [RedisFence] are the guarded data's, not
// a name's, and never expire.
//
// On a server full to maxmemory (noeviction) Unlock, Extend and renewals
// still work: the scripts free or move a hold with writes Redis accepts
// there before writing anything that grows memory. Locks (a hand-off to a
// waiter too) are refused with the server's OOM error; a read hold, or a
// permit of a semaphore that has holders, is granted there (its script
// prunes expired holds first, and Redis lets a script that wrote finish).
package redlock

// The "Keys" section above is the users' view of the key schema written
// down once in internal/scripts: the two are kept in step.

// Architecture (for maintainers): this package is the public API; the
// engine is internal/engine, below it (DESIGN.md "Layers" draws the
// packages and the engine's own layers, which TestLayersCallDown checks).
// A Lock is a handle around the engine's state of it (engine.Hold, in one
// allocation), whose methods call into the engine. The engine reaches the
// public errors and the Observer only through the seams this package sets
// (engine.Say, filled in errors.go; engine.Reporter, adapted in
// observe.go). Inside the engine a hold (hold.go, with its status, lease
// and per-node outcomes in state.go, validity.go and outcome.go) is data
// and transitions, no I/O. It calls up only through the Engine interface,
// for what its user asks (unlock, extend, remaining) and to say it ended;
// the core calls down through transitions that return what changed and
// keeps its own books: loss clock, watchdog, log, observers, Do's cancel.
// kinds.go and keys.go lay out a lock's keys. Parts share the core's
// lifetime through one internal/lifecycle value (wait group, closing), not
// a pointer to the core; the queue and the core share heldNames.
