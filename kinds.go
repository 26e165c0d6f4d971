package redlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// lockKind says what a Lock holds, and so which scripts release, extend and
// measure it. The engine (release.go, watchdog.go, peer.go) asks the lock
// for its calls here and never looks at the kind itself, except that only
// an exclusive lock is ever handed off (handoff.lua).
type lockKind uint8

const (
	kindExclusive lockKind = iota // Lock, TryLock, Do: the name's one holder, its writer
	kindRead                      // RLock, TryRLock: one of the name's read holds
	kindPermit                    // Semaphore.Acquire: one permit
	kindMulti                     // LockAll: several names under one owner value
)

// Key layouts of the kinds other than exclusive (see ownerAndKeys for that one):
//
//	read:   holds set, this owner's released marker, lock key, waiting writers
//	permit: holds set, this owner's released marker, permit count, fence counter
//	multi:  the names' lock keys (see multiKeys for its scripts' keys)
//
// so that a read hold's release keys are keys[:2] and its extend keys
// keys[:1], and a permit's release and extend keys keys[:3] (the count key
// lives and dies with the set).

// multiKeys are the script keys of a multi-name lock, per part: one part
// for all names on a server that takes keys of any slot in one script, one
// per name on a Cluster or Ring client (shards by key). Parts are in the
// names' global order, as acquired.
type multiKeys struct {
	names []string
	locks []string   // the lock keys of names: the lock's keys
	acq   [][]string // multi_acquire.lua: lock keys, fence counters, read holds
	rel   [][]string // multi_release.lua: lock keys, then released markers
	ext   [][]string // multi_extend.lua, multi_pttl.lua: lock keys
}

// parts is how many script calls one release, extend or TTL of l sends to a
// node: one, except for a multi-name lock spread over shards.
func (l *Lock) parts() int {
	if l.multi == nil {
		return 1
	}
	return len(l.multi.ext)
}

// releaseCmd is the release call of part p of l.
func (l *Lock) releaseCmd(p int) (*redis.Script, []string, []any) {
	switch l.kind {
	case kindRead:
		return scriptZRelease, l.keys[:2], []any{l.owner, l.channel, ttlMillis(l.leaseTTL()), "1"}
	case kindPermit:
		return scriptZRelease, l.keys[:3], []any{l.owner, l.channel, ttlMillis(l.leaseTTL()), "0"}
	case kindMulti:
		return scriptMultiRelease, l.multi.rel[p], []any{l.owner, channelSuffix, ttlMillis(l.leaseTTL()), ttlMillis(l.timeout)}
	}
	return scriptRelease, l.relKeys(), releaseArgs(l)
}

// releaseArgs are release.lua's ARGV for l. The reservation for a waiting
// writer lasts l's node timeout, sent only when it is not the default that
// release.lua derives from the lease itself (an argument fewer to box).
func releaseArgs(l *Lock) []any {
	ttl := l.leaseTTL()
	if l.timeout == defaultNodeTimeout(ttl) {
		return []any{l.owner, l.channel, ttlMillis(ttl)}
	}
	return []any{l.owner, l.channel, ttlMillis(ttl), ttlMillis(l.timeout)}
}

// extendCmd is the extend call of part p of l, to a lease of ttl.
func (l *Lock) extendCmd(p int, ttl time.Duration) (*redis.Script, []string, []any) {
	args := []any{l.owner, ttlMillis(ttl), l.guardMillis()}
	switch l.kind {
	case kindRead:
		return scriptZExtend, l.keys[:1], args
	case kindPermit:
		return scriptZExtend, l.keys[:3], args
	case kindMulti:
		return scriptMultiExtend, l.multi.ext[p], args
	}
	return scriptExtend, l.extendKeys(), args
}

// pttlCmd is the remaining-lease call of part p of l.
func (l *Lock) pttlCmd(p int) (*redis.Script, []string) {
	switch l.kind {
	case kindRead, kindPermit:
		return scriptZPTTL, l.keys[:1]
	case kindMulti:
		return scriptMultiPTTL, l.multi.ext[p]
	}
	return scriptPTTL, l.keys[:1]
}

// runParts runs one call per part of l on cl, in the parts' order, and folds
// the replies: the first error ends it.
func (l *Lock) runParts(ctx context.Context, cl Client, cmd func(p int) (*redis.Script, []string, []any), fold func(acc, v int64, first bool) int64) (int64, error) {
	var acc int64
	for p := range l.parts() {
		s, keys, args := cmd(p)
		v, err := s.Run(ctx, cl, keys, args...).Int64()
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
	case acc == replyNotOurs || v == replyNotOurs:
		return replyNotOurs
	case acc == replyAlready && v == replyAlready:
		return replyAlready
	case acc == replyUnpublished || v == replyUnpublished:
		return replyUnpublished
	}
	return replyOK
}

// foldExtend combines extend codes: another owner's if any part is, gone if
// any part is, too late if any part was, extended only if every part was.
func foldExtend(acc, v int64, first bool) int64 {
	switch {
	case first:
		return v
	case acc == replyTaken || v == replyTaken:
		return replyTaken
	case acc == replyGone || v == replyGone:
		return replyGone
	case acc == replyLate || v == replyLate:
		return replyLate
	}
	return replyOK
}

// foldPTTL combines remaining leases: gone if any part is, else the
// shortest (-1, no expiry, outlasts every lease).
func foldPTTL(acc, v int64, first bool) int64 {
	switch {
	case first:
		return v
	case acc == replyNotOurs || v == replyNotOurs:
		return replyNotOurs
	case acc < 0:
		return v
	case v < 0:
		return acc
	}
	return min(acc, v)
}

// writerWait is a waiting Lock call's entry in the queue of waiting writers
// of its name (enqueue, in _lib.lua). The entry lapses 5s after the call's
// last refused attempt; a waiting Lock tries again at least every
// maxTrustedSleep, or at its retry policy's pace while it polls, so a live
// waiter keeps it, and one that crashed delays new readers and the writers
// behind it by at most that.
type writerWait struct {
	id      string // the first attempt's owner value
	entered bool   // an attempt failed, so the script may have entered id
}
