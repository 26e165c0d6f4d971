package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlockgo/redlock/internal/engine"
	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/scripts"
)

// Release releases the lock name if, and only if, owner holds it: for an
// operator who knows the owner value (from [Locker.Inspect], a holder's
// [Lock.Owner] in its logs, or its REDLOCK_OWNER) and must free a lock whose
// holder is stuck, without touching a later holder's lock. The hold may be
// of any kind: the exclusive lock of name, one of its read holds
// ([Locker.RLock]) or a permit of the semaphore name ([Locker.Semaphore]).
// It runs the same script as [Lock.Unlock] (waiters are woken), with the
// Locker's key prefix, and returns nil when this call released the hold.
//
// It returns an error matching ErrNotHeld when owner does not hold name: the
// name is free, held by another owner (left untouched), or owner released it
// already (including by an earlier call of Release whose reply was lost). It
// returns an error for an empty name or owner, a nil Locker, after Close
// (ErrClosed), and when Redis did not answer within the node timeout or ctx
// ended first (then matching ctx.Err()).
//
// The holder's *Lock, if any, reports the lock lost ([Lock.Done],
// [ErrLost]) at once when its Locker's tracking connection hears the
// release (a hold of 50ms or more, see [WithLossTracking]), else at its
// next renewal. It is safe for concurrent use.
func (lk *Locker) Release(ctx context.Context, name, owner string) error {
	return releaseOwner(ctx, lk.core(), name, owner)
}

// Release releases the lock name on every master where owner holds it, as
// [Locker.Release] does for an exclusive lock (a Redlock has no read holds
// or permits). It returns nil when a quorum released it, and an
// error matching ErrNotHeld when so many masters do not hold it for owner
// that it was not held (keys of owner found on a minority are deleted all
// the same).
func (r *Redlock) Release(ctx context.Context, name, owner string) error {
	return releaseOwner(ctx, r.core(), name, owner)
}

// releaseOwner is Release: release.lua for a lock this core may never have
// held, known only by name and owner value.
func releaseOwner(ctx context.Context, c *engine.Core, name, owner string) error {
	switch {
	case c == nil:
		return engine.ErrNoCore
	case name == "":
		return errors.New("redlock: empty lock name")
	case owner == "":
		return errors.New("redlock: empty owner value")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.Life.IsClosing() {
		return ErrClosed
	}
	key := engine.LockKey(c.Cfg.Prefix, name)
	// release.lua's "released" marker tells a holder's Unlock, retried after
	// a lost reply, that it had released the lock itself. Written under the
	// holder's marker key, it would make the holder's own Unlock report
	// success for a lock an operator took away; so this call's marker has a
	// key of its own, and lives 1ms (nothing reads it: see scripts.ReplyAlready below).
	// The release is told to waiters whether or not one marked the name (the
	// last argument): an operator's call is rare, and this keeps the marker
	// to its 1ms (release.lua's quiet path would leave it for the lease).
	keys := []string{key, key + scripts.OperatorSuffix, key + scripts.QueueSuffix, key + scripts.WaitSuffix}
	args := []any{owner, 1, 1, "1"}
	timeout := c.Cfg.Timeout(c.Cfg.TTL)
	rs, interrupted, err := c.Pool.Round(engine.Detached(ctx), c.Pool.Nodes, timeout, timeout, func(ctx context.Context, n *node.Node, cl node.Client) engine.Reply {
		if err := c.Pool.Ids.Identify(ctx, n); err != nil {
			return engine.Reply{Err: err}
		}
		v, err := scripts.Sharded(scripts.Release, c.Cfg.Sharded).Run(ctx, cl, keys, args...).Int64()
		if err == nil && v == scripts.ReplyUnpublished {
			c.Cfg.Logger.Warn("redlock: released, but the server refused to publish the release message; waiters wake by their timers", "name", name)
		}
		// scripts.ReplyAlready would be a retried call of this one after a lost
		// reply; it reads as "not held", like any owner that is gone.
		return engine.Reply{OK: err == nil && (v == scripts.ReplyOK || v == scripts.ReplyUnpublished), Code: v, Err: err}
	}, time.Now().Add(timeout), ctx.Done(), c.Pool.Settled)
	if err != nil {
		return err
	}
	t := c.Pool.Count(rs)
	switch {
	case t.OK >= c.Pool.Quorum:
		return nil
	case c.Pool.Impossible(t.No) && len(c.Pool.Nodes) == 1:
		// Not the exclusive lock's owner: a read hold's or a permit's?
		return releaseSetOwner(ctx, c, name, key, owner, timeout)
	case c.Pool.Impossible(t.No):
		return notHeld("release", name, fmt.Errorf("not held by owner %q", owner))
	}
	return c.Pool.ShortOf("release", name, t, "", engine.CtxErrIf(ctx, interrupted))
}

// releaseSetOwner is Release of a read hold of name or a permit of the
// semaphore name (a Locker's only node), after the exclusive lock turned out
// not to be owner's: zrelease.lua on the read holds, then on the permits.
// Owner values are random UUIDs, so at most one of them holds owner. As in
// releaseOwner, the marker has a key of its own, so that the holder's own
// Unlock still reports the hold as not held.
func releaseSetOwner(ctx context.Context, c *engine.Core, name, key, owner string, timeout time.Duration) error {
	sets := []struct {
		key, channel, reads string
		third               string // zrelease.lua's KEYS[3]: the lock key (its scripts.ReadMark), or a permit count key
	}{
		{key + scripts.ReadersSuffix, engine.ReleaseChannel(key), "1", key}, // read holds publish on the lock's channel, when the last one leaves
		{key + scripts.SemSuffix, engine.ReleaseChannel(key + scripts.SemSuffix), "0", key + scripts.SemSuffix + scripts.PermitsSuffix},
	}
	for _, set := range sets {
		keys := []string{set.key, engine.OwnerKey(set.key, scripts.OperatorSuffix, owner), set.third}
		rs, interrupted, err := c.Pool.Round(engine.Detached(ctx), c.Pool.Nodes, timeout, timeout, func(ctx context.Context, n *node.Node, cl node.Client) engine.Reply {
			v, err := scripts.Sharded(scripts.ZRelease, c.Cfg.Sharded).Run(ctx, cl, keys, owner, set.channel, 1, set.reads).Int64()
			if err == nil && v == scripts.ReplyUnpublished {
				c.Cfg.Logger.Warn("redlock: released, but the server refused to publish the release message; waiters wake by their timers", "name", name)
			}
			return engine.Reply{OK: err == nil && (v == scripts.ReplyOK || v == scripts.ReplyUnpublished), Code: v, Err: err}
		}, time.Now().Add(timeout), ctx.Done(), engine.Never)
		if err != nil {
			return err
		}
		if interrupted {
			return join(fmt.Errorf("redlock: release %q not answered", name), ctx.Err())
		}
		switch r := rs[0]; {
		case r.Err != nil:
			return c.Pool.NodeErr(r.Node, r.Err)
		case r.OK:
			return nil
		}
	}
	return notHeld("release", name, fmt.Errorf("not held by owner %q", owner))
}
