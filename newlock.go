package redlock

import (
	"crypto/rand"
	"encoding/hex"
	"strings"

	"github.com/google/uuid"
)

// The lock of one acquire attempt, for every kind (kinds.go): a fresh owner
// value, its keys, and the call's options. acquire.go's attempt picks the
// constructor by kind; nothing here does I/O.

// inlineNodes is how many nodes' outcomes a Lock keeps without a separate
// allocation: enough for the usual Redlock of 3, 5 or 7 masters.
const inlineNodes = 8

// lockAlloc is a Lock together with the backing arrays of its keys and
// outcome slices, so that the slices cost no allocation of their own: a
// Lock is made per acquire attempt, on the hot path. The Lock is used by
// its address inside; the arrays live as long as it does.
type lockAlloc struct {
	Lock
	keys    [6]string
	outcome [inlineNodes]outcome
}

// newLock makes the lock of one attempt at the exclusive lock of name.
func (c *core) newLock(name, tag, channel string, cfg *config) *Lock {
	a := c.allocLock(name, channel, cfg)
	a.Lock.owner, a.Lock.keys = ownerAndKeys(a.keys[:0], tag, cfg.metadata != "")
	return &a.Lock
}

// makeLock makes the lock of one attempt of another kind (kinds.go), with a
// fresh owner value and no keys yet.
func (c *core) makeLock(name, channel string, cfg *config) *Lock {
	a := c.allocLock(name, channel, cfg)
	a.Lock.owner = uuid.NewString()
	return &a.Lock
}

// allocLock makes a Lock for one attempt, without owner value and keys.
func (c *core) allocLock(name, channel string, cfg *config) *lockAlloc {
	a := &lockAlloc{Lock: Lock{
		eng:           c,
		name:          name,
		channel:       channel,
		fencing:       cfg.fencing,
		autoRenew:     cfg.autoRenew,
		driftFactor:   cfg.driftFactor,
		renewInterval: cfg.renewInterval,
		timeout:       cfg.timeout(cfg.ttl),
		logger:        cfg.logger,
		obs:           cfg.observer,
		maxHold:       cfg.maxHold,
		metadata:      cfg.metadata,
		replicas:      uint16(cfg.replicas),
		ackMillis:     int32(cfg.ackTimeout.Milliseconds()),
		done:          make(chan struct{}),
		ttl:           cfg.ttl,
		renewal:       slot{index: -1},
		loss:          slot{index: -1},
	}}
	l := &a.Lock
	if len(c.nodes) <= len(a.outcome) {
		l.outcome = a.outcome[:len(c.nodes)]
	} else {
		l.outcome = make([]outcome, len(c.nodes))
	}
	return a
}

// ownerAndKeys draws a fresh owner value, a random (version 4) UUID, and
// appends to keys an exclusive lock's keys, all under the hash tag tag:
//
//	0 lock, 1 fence counter (acquire.lua: keys[:2])
//	2 lock, 3 released marker (release.lua: relKeys)
//	4 lock, 5 metadata, with metadata only (extend.lua: extendKeys)
//
// with the owner and the derived keys cut from one string: one allocation
// instead of four.
func ownerAndKeys(keys []string, tag string, metadata bool) (owner string, _ []string) {
	var u [16]byte
	_, _ = rand.Read(u[:])  // never fails (crypto/rand)
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	var hexed [36]byte
	hex.Encode(hexed[0:8], u[0:4])
	hex.Encode(hexed[9:13], u[4:6])
	hex.Encode(hexed[14:18], u[6:8])
	hex.Encode(hexed[19:23], u[8:10])
	hex.Encode(hexed[24:36], u[10:16])
	hexed[8], hexed[13], hexed[18], hexed[23] = '-', '-', '-', '-'

	var b strings.Builder
	b.Grow(len(hexed) + 3*len(tag) + len(fenceSuffix) + len(releasedSuffix) + len(metaSuffix))
	b.Write(hexed[:])
	b.WriteString(tag)
	b.WriteString(fenceSuffix)
	b.WriteString(tag)
	b.WriteString(releasedSuffix)
	if metadata {
		b.WriteString(tag)
		b.WriteString(metaSuffix)
	}
	s := b.String()
	owner, s = s[:len(hexed)], s[len(hexed):]
	cut := func(n int) string {
		var part string
		part, s = s[:n], s[n:]
		return part
	}
	keys = append(keys, tag, cut(len(tag)+len(fenceSuffix)), tag, cut(len(tag)+len(releasedSuffix)))
	if metadata {
		keys = append(keys, tag, cut(len(tag)+len(metaSuffix)))
	}
	return owner, keys
}

// newReadLock makes the lock of one read-hold attempt. Its keys: the read
// holds, its own released marker, the lock key, the waiting writers.
func (c *core) newReadLock(name, tag, channel string, cfg *config) *Lock {
	l := c.makeLock(name, channel, cfg)
	l.kind, l.metadata = kindRead, ""
	readers := tag + readersSuffix
	l.keys = []string{readers, ownerKey(readers, releasedSuffix, l.owner), tag, tag + writersSuffix}
	return l
}

// newPermit makes the lock of one attempt at a permit of the semaphore
// whose set of holders is set. Its keys: the set, its own released marker,
// the permit count, the fence counter.
func (c *core) newPermit(name, set, channel string, cfg *config, permits int) *Lock {
	l := c.makeLock(name, channel, cfg)
	l.kind, l.metadata, l.permits = kindPermit, "", permits
	l.keys = []string{set, ownerKey(set, releasedSuffix, l.owner), set + permitsSuffix, set + fenceSuffix}
	return l
}

// newMultiLock makes the lock of one attempt at the names of mk, joined in
// name; channel is the first name's.
func (c *core) newMultiLock(name, channel string, cfg *config, mk *multiKeys) *Lock {
	l := c.makeLock(name, channel, cfg)
	l.kind, l.metadata, l.multi, l.keys = kindMulti, "", mk, mk.locks
	return l
}

// newMultiKeys lays out the keys of a multi-name lock on names (sorted,
// distinct): one part for all of them, or one per name when sharded.
func newMultiKeys(prefix string, names []string, sharded bool) *multiKeys {
	mk := &multiKeys{names: names}
	for _, name := range names {
		mk.locks = append(mk.locks, lockKey(prefix, name))
	}
	part := func(names []string) {
		n := len(names)
		acq := make([]string, 3*n)
		rel := make([]string, 2*n)
		for i, name := range names {
			tag := lockKey(prefix, name)
			acq[i], acq[n+i], acq[2*n+i] = tag, tag+fenceSuffix, tag+readersSuffix
			rel[i], rel[n+i] = tag, tag+releasedSuffix
		}
		mk.acq = append(mk.acq, acq)
		mk.rel = append(mk.rel, rel)
		mk.ext = append(mk.ext, acq[:n])
	}
	if !sharded {
		part(names)
		return mk
	}
	for i := range names {
		part(names[i : i+1])
	}
	return mk
}
