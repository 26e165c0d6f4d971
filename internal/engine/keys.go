package engine

import (
	"crypto/rand"
	"encoding/hex"
	"strings"

	"github.com/redlockgo/redlock/internal/scripts"
)

func LockKey(prefix, name string) string { return "{" + prefix + name + "}" }

// KeyAndChannel returns LockKey(prefix, name) and its ReleaseChannel, the
// key cut from the channel's string: one allocation instead of two per Lock
// call.
func KeyAndChannel(prefix, name string) (key, channel string) {
	channel = "{" + prefix + name + "}" + scripts.ChannelSuffix
	return channel[:len(channel)-len(scripts.ChannelSuffix)], channel
}

func ReleaseChannel(lockKey string) string { return lockKey + scripts.ChannelSuffix }

// heldKey is the lock key of a release channel.
func heldKey(channel string) string { return strings.TrimSuffix(channel, scripts.ChannelSuffix) }

// OwnerKey is the key of one owner's marker next to the sorted set of holds
// set: "<set><suffix>:<owner>" (scripts.ReleasedSuffix, scripts.OperatorSuffix).
func OwnerKey(set, suffix, owner string) string { return set + suffix + ":" + owner }

// multiKeys are the script keys of a multi-name lock, per part: one part
// for all names on a server that takes keys of any slot in one script, one
// per name on a Cluster or Ring client (shards by key). Parts are in the
// names' global order, as acquired.
type multiKeys struct {
	Names []string
	Locks []string   // the lock keys of names: the lock's keys
	acq   [][]string // multi_acquire.lua: lock keys, fence counters, waiting marks
	Rel   [][]string // multi_release.lua: lock keys, released markers, queues
	ext   [][]string // multi_extend.lua, multi_pttl.lua: lock keys
}

// fenceKeys is an exclusive lock's fence counter, as raise.lua's KEYS.
func fenceKeys(l *Hold) []string { return l.Keys[1:2] }

// fenceKey names l's fence counter in error messages.
func fenceKey(l *Hold) string {
	if l.Kind == KindPermit {
		return l.Keys[3]
	}
	return l.Keys[1]
}

// ReleaseKeys are release.lua's KEYS: the lock key, its released marker,
// its queue of waiting writers and its waiting mark, the last four of
// l.keys.
func ReleaseKeys(l *Hold) []string { return l.Keys[len(l.Keys)-4:] }

// OwnerAndKeys draws a fresh owner value, a random (version 4) UUID, and
// appends to keys an exclusive lock's keys, all under the hash tag tag:
//
//	0 lock, 1 fence counter, 2 queue, 3 waiting mark (acquire.lua: keys[:2]
//	  or keys[:4]), with metadata 4 metadata (acquire.lua: keys[:5])
//	then lock, released marker, queue, waiting mark (release.lua: ReleaseKeys)
//
// with the owner and the derived keys cut from one string: one allocation
// instead of six.
func OwnerAndKeys(keys []string, tag string, metadata bool) (owner string, _ []string) {
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

	suffixes := [...]string{scripts.FenceSuffix, scripts.QueueSuffix, scripts.WaitSuffix, scripts.ReleasedSuffix, scripts.MetaSuffix}
	n := len(suffixes)
	if !metadata {
		n--
	}
	var b strings.Builder
	b.Grow(len(hexed) + n*len(tag) + len(scripts.FenceSuffix) + len(scripts.QueueSuffix) + len(scripts.WaitSuffix) + len(scripts.ReleasedSuffix) + len(scripts.MetaSuffix))
	b.Write(hexed[:])
	for _, suffix := range suffixes[:n] {
		b.WriteString(tag)
		b.WriteString(suffix)
	}
	s := b.String()
	owner, s = s[:len(hexed)], s[len(hexed):]
	cut := func(suffix string) string {
		var part string
		part, s = s[:len(tag)+len(suffix)], s[len(tag)+len(suffix):]
		return part
	}
	fence, queue, waiting, released := cut(scripts.FenceSuffix), cut(scripts.QueueSuffix), cut(scripts.WaitSuffix), cut(scripts.ReleasedSuffix)
	keys = append(keys, tag, fence, queue, waiting)
	if metadata {
		keys = append(keys, cut(scripts.MetaSuffix))
	}
	return owner, append(keys, tag, released, queue, waiting)
}

// NewMultiKeys lays out the keys of a multi-name lock on names (sorted,
// distinct): one part for all of them, or one per name when sharded.
func NewMultiKeys(prefix string, names []string, sharded bool) *multiKeys {
	mk := &multiKeys{Names: names}
	for _, name := range names {
		mk.Locks = append(mk.Locks, LockKey(prefix, name))
	}
	part := func(names []string) {
		n := len(names)
		acq := make([]string, 3*n)
		rel := make([]string, 3*n)
		for i, name := range names {
			tag := LockKey(prefix, name)
			acq[i], acq[n+i], acq[2*n+i] = tag, tag+scripts.FenceSuffix, tag+scripts.WaitSuffix
			rel[i], rel[n+i], rel[2*n+i] = tag, tag+scripts.ReleasedSuffix, tag+scripts.QueueSuffix
		}
		mk.acq = append(mk.acq, acq)
		mk.Rel = append(mk.Rel, rel)
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
