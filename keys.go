package redlock

import "strings"

// The key schema: every key and channel of a name, which doc.go's "Keys"
// tells users. None of these strings may change: during a rollout two
// versions share the keys, and a process that spelled one otherwise would
// see no lock, queue or counter where there is one. The scripts build some
// of them themselves; each script's header names the constants here that
// it mirrors. With K the lock key "{<prefix><name>}" (lockKey):
//
//	K                  an owner value, or reservedPrefix + a queued writer's id
//	K:fence            fence counter
//	K:released         released marker: the owner that released
//	K:meta             metadata: "<owner>\n<metadata>"
//	K:readers          read holds; K:readers:released:<owner> (ownerKey)
//	K:writers          waiting writers' ids; K:writers:<id> keeps one alive
//	K:sem              permits; K:sem:permits, K:sem:fence, K:sem:released:<owner>
//	K:rel              release channel: released owners, or passedPrefix + an id
//	K:released-by-operator, <set>:released-by-operator:<owner>  Locker.Release
//
// The marks of a RedisFence are not a name's: fenceMarkKey (fencing.go).
const (
	fenceSuffix    = ":fence"
	releasedSuffix = ":released"
	metaSuffix     = ":meta"
	readersSuffix  = ":readers" // read holds (RLock)
	writersSuffix  = ":writers" // writers waiting (writer preference)
	semSuffix      = ":sem"     // a semaphore's set, after the lock key
	permitsSuffix  = ":permits" // the permit count, after the set's key
	operatorSuffix = ":released-by-operator"
	channelSuffix  = ":rel"

	// reservedPrefix starts the value of a lock key that a release reserved
	// for a queued writer: "queued:<its id>" (pass, in _lib.lua).
	reservedPrefix = "queued:"
	// passedPrefix starts the message of a release that passed the name to
	// a queued writer: "w:<its id>".
	passedPrefix = "w:"
)

func lockKey(prefix, name string) string { return "{" + prefix + name + "}" }

// keyAndChannel returns lockKey(prefix, name) and its releaseChannel, the
// key cut from the channel's string: one allocation instead of two per Lock
// call.
func keyAndChannel(prefix, name string) (key, channel string) {
	channel = "{" + prefix + name + "}" + channelSuffix
	return channel[:len(channel)-len(channelSuffix)], channel
}

func releaseChannel(lockKey string) string { return lockKey + channelSuffix }

// heldKey is the lock key of a release channel.
func heldKey(channel string) string { return strings.TrimSuffix(channel, channelSuffix) }

// ownerKey is the key of one owner's marker next to the sorted set of holds
// set: "<set><suffix>:<owner>" (releasedSuffix, operatorSuffix). The
// scripts name a waiting writer's alive key the same way:
// "<lock key>:writers:<id>".
func ownerKey(set, suffix, owner string) string { return set + suffix + ":" + owner }
