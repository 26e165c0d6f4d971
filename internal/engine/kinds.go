package engine

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/node"
	"github.com/redlockgo/redlock/internal/scripts"
)

// This file is the kinds of lock, and for each kind its keys (of the schema
// in keys.go) and the script calls that acquire, release, extend and
// measure it, with the decoders of their replies.

// lockKind says what a Lock holds, and so which scripts acquire, release,
// extend and measure it: its row of the kinds table. The engine never
// switches on the kind itself; it asks the table.
type lockKind uint8

const (
	KindExclusive lockKind = iota // Lock, TryLock, Do: the name's one holder, its writer
	KindRead                      // RLock, TryRLock: one of the name's read holds
	KindPermit                    // Semaphore.Acquire: one permit
	KindMulti                     // LockAll: several names under one owner value
)

// Key layouts of the kinds other than exclusive (see OwnerAndKeys for that one):
//
//	read:   holds set, this owner's released marker, lock key, waiting writers, waiting mark
//	permit: holds set, this owner's released marker, permit count, fence counter
//	multi:  the names' lock keys (see multiKeys for its scripts' keys)
//
// so that a read hold's release keys are keys[:3] (the lock key holds the
// read holds' scripts.ReadMark) and its extend keys keys[:1], and a permit's
// release and extend keys keys[:3] (the count key lives and dies with the
// set).

// scriptCall is one script call of part p of a lock (one, except for a
// multi-name lock over shards), for a lease of ttl where the call sets one.
type scriptCall func(l *Hold, p int, ttl time.Duration) (*redis.Script, []string, []any)

// kindOps is one row of the kinds table.
type kindOps struct {
	// keys sets the owner value and keys of an attempt's lock l, appending
	// the keys to buf, which has room for nine.
	keys func(l *Hold, a *Acquisition, buf []string)
	// acquire is the acquire call of the first part, with the boxed lease,
	// fencing argument (fenceArg), token floor and waiting writer's id.
	acquire               func(l *Hold, ttl, fence, floor any, wait string) (*redis.Script, []string, []any)
	release, extend, pttl scriptCall
	// handsOff: an Unlock of this kind may pass the name straight to a
	// waiter of the same core (handoff.lua).
	handsOff bool
	// rearmArg: on a tracking data connection the extend call needs ARGV[4]
	// to read its key again after the move (zextend.lua); extend.lua and
	// multi_extend.lua read after the move anyway (their ownership check).
	rearmArg bool
}

// kinds is the table of lock kinds, indexed by lockKind.
var kinds = [...]kindOps{
	KindExclusive: {keys: exclusiveKeys, acquire: exclusiveAcquire, release: exclusiveRelease, extend: exclusiveExtend, pttl: singlePTTL, handsOff: true},
	KindRead:      {keys: readKeys, acquire: readAcquire, release: readRelease, extend: readExtend, pttl: holdPTTL, rearmArg: true},
	KindPermit:    {keys: permitKeys, acquire: permitAcquire, release: permitRelease, extend: permitExtend, pttl: holdPTTL, rearmArg: true},
	KindMulti:     {keys: multiLockKeys, acquire: multiAcquire, release: multiRelease, extend: multiExtend, pttl: multiPTTL},
}

// Exclusive: keys from OwnerAndKeys (0 lock, 1 fence counter, 2 queue,
// 3 waiting mark, with metadata 4 metadata; then the release keys: lock,
// released marker, queue, waiting mark).

func exclusiveKeys(l *Hold, a *Acquisition, buf []string) {
	l.Owner, l.Keys = OwnerAndKeys(buf, a.Tag, a.Cfg.Metadata != "")
	if a.writer && !a.ww.entered && a.ww.id != "" {
		// A Lock call that queued before any attempt: its id is on no
		// server yet, so its first attempt takes it as its owner value, as
		// a call's first attempt does (waitID). acquire.lua infers the id
		// then, and a grant has no queue entry to remove.
		l.Owner = a.ww.id
	}
}

// exclusiveAcquire is acquire.lua's call. Constants boxed in an any cost no
// allocation; strings and numbers computed at run time each cost one, so
// the owner value is boxed once. fence is fenceArg's, with the token floor
// after a colon (fenceFloor). The call leaves out what acquire.lua infers
// (the waiting writer's id of a first attempt, its owner value), so that
// TryLock and a Lock's first attempt on one server stay within the 10
// arguments an unauthenticated connection may send.
func exclusiveAcquire(l *Hold, ttl, fence, _ any, wait string) (*redis.Script, []string, []any) {
	owner := any(l.Owner)
	switch {
	case l.Metadata != "":
		return scripts.Acquire, l.Keys[:5], []any{owner, ttl, fence, wait, metaValue(l.Owner, l.Metadata)}
	case wait == "":
		return scripts.Acquire, l.Keys[:2], []any{owner, ttl, fence}
	case wait == l.Owner:
		return scripts.Acquire, l.Keys[:4], []any{owner, ttl, fence}
	}
	return scripts.Acquire, l.Keys[:4], []any{owner, ttl, fence, wait}
}

func exclusiveRelease(l *Hold, _ int, _ time.Duration) (*redis.Script, []string, []any) {
	return scripts.Sharded(scripts.Release, l.sharded), ReleaseKeys(l), releaseArgs(l)
}

// handOffArgs are handoff.lua's KEYS and ARGV for releasing l and granting
// nl, with nl's options cfg, to the waiting writer wid: with a lease of its
// own, or, when inherits, the one in force.
func handOffArgs(l, nl *Hold, cfg *Config, wid string, inherits bool) ([]string, []any) {
	rel := ReleaseKeys(l)
	keys := []string{l.Keys[0], l.Keys[1], rel[1], rel[2]}
	fence := fenceArg(cfg)
	if cfg.Fencing {
		// The token's time floor is this client's clock, as an acquire's
		// (attempt.command): no TIME on the server.
		nl.fenceFloor.set(cfg, time.Now().UnixMicro())
		fence = &nl.fenceFloor
	}
	var lease any = "0"
	if !inherits {
		lease = ttlMillis(cfg.TTL)
	}
	args := []any{l.Owner, nl.Owner, lease, fence, wid}
	if nl.Metadata != "" {
		keys = append(keys, nl.Keys[4])
		args = append(args, metaValue(nl.Owner, nl.Metadata))
	}
	return keys, args
}

// exclusiveExtend is extend.lua's call: the lock key alone (see extend.lua;
// the metadata is kept by companions).
func exclusiveExtend(l *Hold, _ int, ttl time.Duration) (*redis.Script, []string, []any) {
	return scripts.Extend, l.Keys[:1], extendArgs(l, ttl)
}

func singlePTTL(l *Hold, _ int, _ time.Duration) (*redis.Script, []string, []any) {
	return scripts.PTTL, l.Keys[:1], []any{l.Owner}
}

// releaseArgv is release.lua's EVALSHA command for an exclusive lock (see
// node.EvalArgs), nil for the other kinds. It reuses the lock key, owner and
// lease its acquire command boxed (Lock.boxed).
func releaseArgv(l *Hold) []any {
	if l.Kind != KindExclusive {
		return nil
	}
	b := l.boxed
	if b.key == nil {
		return node.EvalArgs(scripts.Sharded(scripts.Release, l.sharded), ReleaseKeys(l), releaseArgs(l))
	}
	ttl := l.leaseTTL()
	lease := b.lease
	if v, ok := lease.(int64); !ok || v != ttlMillis(ttl) {
		lease = ttlMillis(ttl) // extended to another lease
	}
	rel := ReleaseKeys(l)
	queue, waiting := b.queue, b.waiting
	if queue == nil {
		queue, waiting = rel[2], rel[3]
	}
	argv := make([]any, 0, 12)
	argv = append(argv, "evalsha", scripts.Sources[scripts.Sharded(scripts.Release, l.sharded)].SHA, 4, b.key, rel[1], queue, waiting, b.owner, lease)
	if l.timeout != defaultNodeTimeout(ttl) || l.announce {
		argv = append(argv, ttlMillis(l.timeout))
	}
	if l.announce {
		argv = append(argv, "1")
	}
	return argv
}

// releaseArgs are release.lua's ARGV for an exclusive lock l, nil for the
// other kinds. The reservation for a waiting writer lasts l's node timeout,
// sent only when it is not the default that release.lua derives from the
// lease itself (an argument fewer to box), or when an election's leader
// tells its release to observers whether or not anyone waits.
func releaseArgs(l *Hold) []any {
	if l.Kind != KindExclusive {
		return nil
	}
	ttl := l.leaseTTL()
	switch {
	case l.announce:
		return []any{l.Owner, ttlMillis(ttl), ttlMillis(l.timeout), "1"}
	case l.timeout == defaultNodeTimeout(ttl):
		return []any{l.Owner, ttlMillis(ttl)}
	}
	return []any{l.Owner, ttlMillis(ttl), ttlMillis(l.timeout)}
}

func extendArgs(l *Hold, ttl time.Duration) []any {
	return []any{l.Owner, ttlMillis(ttl), l.guardMillis()}
}

// Read holds and permits live in a sorted set of holds:
//
//	read:   holds set, this owner's released marker, lock key, waiting writers, waiting mark
//	permit: holds set, this owner's released marker, permit count, fence counter
//
// so that a read hold's release keys are keys[:3] (the lock key holds the
// read holds' scripts.ReadMark) and its extend keys keys[:1], and a permit's
// release and extend keys keys[:3] (the count key lives and dies with the
// set).

func readKeys(l *Hold, a *Acquisition, buf []string) {
	l.Owner, l.Metadata = uuid.NewString(), ""
	readers := a.Tag + scripts.ReadersSuffix
	l.Keys = append(buf, readers, OwnerKey(readers, scripts.ReleasedSuffix, l.Owner), a.Tag, a.Tag+scripts.QueueSuffix, a.Tag+scripts.WaitSuffix)
}

func permitKeys(l *Hold, a *Acquisition, buf []string) {
	l.Owner, l.Metadata, l.permits = uuid.NewString(), "", a.Permits
	l.Keys = append(buf, a.Tag, OwnerKey(a.Tag, scripts.ReleasedSuffix, l.Owner), a.Tag+scripts.PermitsSuffix, a.Tag+scripts.FenceSuffix)
}

func readAcquire(l *Hold, ttl, _, _ any, _ string) (*redis.Script, []string, []any) {
	return scripts.RLock, []string{l.Keys[2], l.Keys[0], l.Keys[3], l.Keys[4]}, []any{l.Owner, ttl}
}

func permitAcquire(l *Hold, ttl, fence, _ any, _ string) (*redis.Script, []string, []any) {
	return scripts.SemAcquire, []string{l.Keys[0], l.Keys[3], l.Keys[2]}, []any{l.Owner, ttl, fence, l.permits}
}

// readRelease and permitRelease are zrelease.lua's call; its last argument
// says whether the release wakes waiting writers (a read hold) or not.
func readRelease(l *Hold, _ int, _ time.Duration) (*redis.Script, []string, []any) {
	return scripts.Sharded(scripts.ZRelease, l.sharded), l.Keys[:3], []any{l.Owner, l.Channel, ttlMillis(l.leaseTTL()), "1"}
}

func permitRelease(l *Hold, _ int, _ time.Duration) (*redis.Script, []string, []any) {
	return scripts.Sharded(scripts.ZRelease, l.sharded), l.Keys[:3], []any{l.Owner, l.Channel, ttlMillis(l.leaseTTL()), "0"}
}

func readExtend(l *Hold, _ int, ttl time.Duration) (*redis.Script, []string, []any) {
	return scripts.ZExtend, l.Keys[:1], extendArgs(l, ttl)
}

func permitExtend(l *Hold, _ int, ttl time.Duration) (*redis.Script, []string, []any) {
	return scripts.ZExtend, l.Keys[:3], extendArgs(l, ttl)
}

func holdPTTL(l *Hold, _ int, _ time.Duration) (*redis.Script, []string, []any) {
	return scripts.ZPTTL, l.Keys[:1], []any{l.Owner}
}

// A multi-name lock's keys are its names' lock keys; its scripts' keys are
// in multiKeys, per part.

func multiLockKeys(l *Hold, a *Acquisition, _ []string) {
	l.Owner, l.Metadata, l.Multi, l.Keys = uuid.NewString(), "", a.Multi, a.Multi.Locks
}

func multiAcquire(l *Hold, ttl, fence, floor any, _ string) (*redis.Script, []string, []any) {
	return scripts.MultiAcquire, l.Multi.acq[0], []any{l.Owner, ttl, fence, floor}
}

func multiRelease(l *Hold, p int, _ time.Duration) (*redis.Script, []string, []any) {
	return scripts.Sharded(scripts.MultiRelease, l.sharded), l.Multi.Rel[p], []any{l.Owner, scripts.ChannelSuffix, ttlMillis(l.leaseTTL()), ttlMillis(l.timeout)}
}

func multiExtend(l *Hold, p int, ttl time.Duration) (*redis.Script, []string, []any) {
	return scripts.MultiExtend, l.Multi.ext[p], extendArgs(l, ttl)
}

func multiPTTL(l *Hold, p int, _ time.Duration) (*redis.Script, []string, []any) {
	return scripts.MultiPTTL, l.Multi.ext[p], []any{l.Owner}
}

// keepCall is one keep.lua call: a key that lives as long as a lock's lease,
// other than the one its renewal moves.
type keepCall struct {
	key  string
	args []any
}

// companions appends to buf the keep.lua calls that go with a renewal of l
// to ttl, apart from the renewal itself (extend.lua says why): the
// metadata of an exclusive lock, the lock key's scripts.ReadMark of a read hold,
// the count key of a permit, and the fence
// counter of a lock held long enough that it could expire before the new
// lease ends (counterDue). Their outcome never decides the renewal's.
func companions(l *Hold, ttl time.Duration, buf []keepCall) []keepCall {
	ms := ttlMillis(ttl)
	due := l.fencing && time.Now().Add(ttl).After(l.counterUntil)
	switch l.Kind {
	case KindExclusive:
		if l.Metadata != "" {
			buf = append(buf, keepCall{l.Keys[4], []any{ms, l.Owner}})
		}
		if due {
			buf = append(buf, keepCall{l.Keys[1], []any{ms}})
		}
	case KindRead:
		// The lock key's scripts.ReadMark lives as long as the longest read hold.
		buf = append(buf, keepCall{l.Keys[2], []any{ms, scripts.ReadMarkOwner}})
	case KindPermit:
		buf = append(buf, keepCall{l.Keys[2], []any{ms}})
		if due {
			buf = append(buf, keepCall{l.Keys[3], []any{ms}})
		}
	case KindMulti:
		if due {
			for _, acq := range l.Multi.acq {
				n := len(acq) / 3
				for _, k := range acq[n : 2*n] {
					buf = append(buf, keepCall{k, []any{ms}})
				}
			}
		}
	}
	return buf
}

// keepCompanions runs l's companions for a renewal to ttl on cl, one call
// per key, so that none is ever split from another by a slot migration.
// Errors are dropped: the next renewal sends them again, and what a missed
// one costs is the key's life, never the lock.
func keepCompanions(ctx context.Context, cl node.Client, l *Hold, ttl time.Duration) {
	for _, k := range companions(l, ttl, nil) {
		_ = scripts.Keep.Run(ctx, cl, []string{k.key}, k.args...).Err()
	}
}

// parts is how many script calls one release, extend or TTL of l sends to a
// node: one, except for a multi-name lock spread over shards.
func parts(l *Hold) int {
	if l.Multi == nil {
		return 1
	}
	return len(l.Multi.ext)
}

// runParts runs call for each part of l on cl, in the parts' order, and
// folds the replies: the first error ends it. TRYAGAIN is retried
// (node.TryingAgain).
func runParts(ctx context.Context, cl node.Client, l *Hold, call scriptCall, ttl time.Duration, fold func(acc, v int64, first bool) int64) (int64, error) {
	var acc int64
	for p := range parts(l) {
		s, keys, args := call(l, p, ttl)
		var again node.TryingAgain
		v, err := s.Run(ctx, cl, keys, args...).Int64()
		for again.Retry(ctx, err) {
			v, err = s.Run(ctx, cl, keys, args...).Int64()
		}
		if err != nil {
			return 0, err
		}
		acc = fold(acc, v, p == 0)
	}
	return acc, nil
}

// foldRelease combines the release codes of a lock's parts: not ours if
// any part was not, already released only if every part was, unpublished
// if any part's message was refused.
func foldRelease(acc, v int64, first bool) int64 {
	switch {
	case first:
		return v
	case acc == scripts.ReplyNotOurs || v == scripts.ReplyNotOurs:
		return scripts.ReplyNotOurs
	case acc == scripts.ReplyAlready && v == scripts.ReplyAlready:
		return scripts.ReplyAlready
	case acc == scripts.ReplyUnpublished || v == scripts.ReplyUnpublished:
		return scripts.ReplyUnpublished
	}
	return scripts.ReplyOK
}

// foldExtend combines extend codes: another owner's if any part is, gone if
// any part is, too late if any part was, extended only if every part was.
func foldExtend(acc, v int64, first bool) int64 {
	switch {
	case first:
		return v
	case acc == scripts.ReplyTaken || v == scripts.ReplyTaken:
		return scripts.ReplyTaken
	case acc == scripts.ReplyGone || v == scripts.ReplyGone:
		return scripts.ReplyGone
	case acc == scripts.ReplyLate || v == scripts.ReplyLate:
		return scripts.ReplyLate
	}
	return scripts.ReplyOK
}

// foldPTTL combines remaining leases: another owner's if any part is, gone
// if any part is, else the shortest (-1, no expiry, outlasts every lease).
func foldPTTL(acc, v int64, first bool) int64 {
	switch {
	case first:
		return v
	case acc == scripts.ReplyOthers || v == scripts.ReplyOthers:
		return scripts.ReplyOthers
	case acc == scripts.ReplyNotOurs || v == scripts.ReplyNotOurs:
		return scripts.ReplyNotOurs
	case acc < 0:
		return v
	case v < 0:
		return acc
	}
	return min(acc, v)
}

// inlineNodes is how many nodes' outcomes a Lock keeps without a separate
// allocation: enough for the usual Redlock of 3, 5 or 7 masters.
const inlineNodes = 8

// LockAlloc is a Lock's state together with the backing arrays of its keys
// and outcome slices, so that the slices cost no allocation of their own: a
// Lock is made per acquire attempt, on the hot path. It lives inside its
// Lock (Say.NewAlloc: one allocation for both); the arrays live as long as
// the state does.
type LockAlloc struct {
	Hold
	keys    [9]string
	outcome [inlineNodes]outcome
}

// newLock makes the lock of one attempt of a: a fresh owner value, the
// keys of its kind, and the call's options; engine is what it reports to,
// nodes how many nodes it is acquired on. Nothing here does I/O.
func (a *Acquisition) newLock(eng Engine, nodes int) *Hold {
	cfg := a.Cfg
	la, user := Say.NewAlloc()
	la.Hold = Hold{
		User:          user,
		Eng:           eng,
		Name:          a.Name,
		Channel:       a.Channel,
		Kind:          a.Kind,
		fencing:       cfg.Fencing,
		autoRenew:     cfg.AutoRenew,
		sharded:       cfg.Sharded,
		announce:      cfg.Announce,
		renewInterval: cfg.RenewInterval,
		timeout:       cfg.Timeout(cfg.TTL),
		logger:        cfg.Logger,
		obs:           cfg.Observer,
		maxHold:       cfg.MaxHold,
		Metadata:      cfg.Metadata,
		replicas:      uint16(cfg.Replicas),
		ackMillis:     int32(cfg.AckTimeout.Milliseconds()),
		lease:         lease{ttl: cfg.TTL, driftFactor: cfg.DriftFactor},
		renewal:       Slot{Index: -1},
		Loss:          Slot{Index: -1},
	}
	l := &la.Hold
	if nodes <= len(la.outcome) {
		l.outcome = la.outcome[:nodes]
	} else {
		l.outcome = make([]outcome, nodes)
	}
	kinds[a.Kind].keys(l, a, la.keys[:0])
	if cfg.Fencing {
		// The grant will give the counter this life at least (mint).
		l.counterUntil = time.Now().Add(max(cfg.Retention, cfg.TTL))
	}
	return l
}
