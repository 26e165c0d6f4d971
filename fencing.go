package redlock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/scripts"
)

// StaleTokenError is the error of a fencing guard that rejected a token
// because it had already admitted a higher one: the lock that issued the
// token was superseded. It matches [ErrStaleToken] with [errors.Is]; use
// [errors.As] to read the tokens.
type StaleTokenError struct {
	// Token is the rejected token.
	Token int64
	// Highest is the highest token the guard had admitted when it rejected
	// Token; it is greater than Token.
	Highest int64
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("redlock: stale fencing token %d (highest admitted %d)", e.Token, e.Highest)
}

// Unwrap returns [ErrStaleToken].
func (e *StaleTokenError) Unwrap() error { return ErrStaleToken }

// Fence is a resource-side guard for fencing tokens, for a resource that
// lives in this process. It admits a token that is at least the highest it
// has admitted so far, raising that high-water mark, and rejects a lower one.
// A holder that was paused past its lease, while a later holder took the
// lock and presented its higher token, is thereby kept away from the
// resource.
//
// The protocol has two steps. On entry to the critical section, before
// reading the resource, the holder presents [Lock.Token] to Admit: this
// registers the token, so a superseded holder that read earlier and writes
// later is caught. Then every write presents the token again. Equal tokens
// are admitted, because one holder writes many times. Admit only decides;
// when the decision and the write must not be separated by another holder's
// Admit, the resource serialises them itself (for example by holding its own
// mutex around Admit and the write), as a storage server does per request.
//
// The same protocol applies to resources elsewhere. [RedisFence] implements
// it for keys in Redis. In SQL, give each guarded row a fencing column
// (fence_token BIGINT NOT NULL DEFAULT 0) and make the check part of the
// statement, which is atomic for its row:
//
//	-- on entry: register the token
//	UPDATE t SET fence_token = $1 WHERE id = $2 AND fence_token <= $1;
//	-- every write
//	UPDATE t SET v = $1, fence_token = $2 WHERE id = $3 AND fence_token <= $2;
//
// Zero rows affected means the token is stale (or the row is missing): treat
// it as [ErrStaleToken] and roll back.
//
// The zero value is ready to use, with no token admitted. A Fence is safe for
// concurrent use and must not be copied after first use. Admit is lock-free
// and does not allocate when it admits.
type Fence struct {
	// highest is the high-water mark: the highest token admitted, 0 before
	// the first. It only grows.
	highest atomic.Int64
}

// Admit admits token if it is at least the highest token admitted so far,
// and raises the mark to it. It returns a [*StaleTokenError], which matches
// [ErrStaleToken], when a higher token was admitted before; the mark is then
// unchanged.
//
// Tokens are at least 1 (see [Lock.Token]). A token below 1 is not a token,
// for example the 0 of a lock taken with fencing off: Admit returns an error
// that does not match ErrStaleToken and leaves the mark unchanged.
func (f *Fence) Admit(token int64) error {
	if token < 1 {
		return fmt.Errorf("redlock: invalid fencing token %d: tokens are at least 1 (was the lock taken with fencing off?)", token)
	}
	for {
		h := f.highest.Load()
		if token < h {
			return &StaleTokenError{Token: token, Highest: h}
		}
		// An equal token needs no write: the Load above is the moment it
		// was admitted. A failed CAS means another token got in between;
		// it may have made ours stale, so decide again.
		if token == h || f.highest.CompareAndSwap(h, token) {
			return nil
		}
	}
}

// Highest returns the highest token admitted so far, or 0 if none was.
func (f *Fence) Highest() int64 { return f.highest.Load() }

// fenceMaxRedisToken is the largest token a RedisFence accepts: its scripts
// compare tokens as Lua numbers (IEEE doubles), exact for integers up to
// 2^53. Lock tokens follow the clock in microseconds (about 1.8e15 in
// 2027) and reach 2^53 around the year 2255.
const fenceMaxRedisToken = 1 << 53

// fenceMarkPrefix starts every mark key. It holds no brace, so the first '{'
// of a mark key is the one fenceMarkKey puts right after it.
const fenceMarkPrefix = "redlock:fence:"

var (
	fenceAdmitScript = scripts.NewScript("fence_admit.lua")
	fenceSetScript   = scripts.NewScript("fence_set.lua")
	fenceDelScript   = scripts.NewScript("fence_del.lua")
	fenceHSetScript  = scripts.NewScript("fence_hset.lua")
)

// RedisFence guards keys kept in Redis with fencing tokens, the Redis
// counterpart of [Fence]. Each guarded key has a mark key holding the
// highest token admitted for it. Every method is one Lua script that
// compares the caller's token with the mark, raises the mark, and applies
// its write only if the token is not stale, atomically on the server. The
// protocol is Fence's: [RedisFence.Admit] with [Lock.Token] on entry to the
// critical section, before reading the guarded key, then a guarded write
// ([RedisFence.Set], [RedisFence.HSet], [RedisFence.Del]) for every change.
// Reads need no guard.
//
// The guarded data may live on another Redis than the locks, and preferably
// does: the fence is only as durable as its marks. A mark lost to a restart
// without persistence or to a failover lets a superseded holder write once
// more; kept on the locks' own Redis, marks are lost exactly when locks are,
// which is when superseded holders appear.
//
// The mark of key K is the string key
//
//	"redlock:fence:{" + tag + "}:" + K
//
// where tag hashes to K's Redis Cluster slot, so the scripts run on a
// Cluster without CROSSSLOT errors, whatever K is (see [RedisFence.MarkKey]).
// Marks never expire: one small key is kept per key ever guarded. They
// outlive the data on purpose: Del keeps the mark, so a superseded holder
// cannot re-create a deleted key. Delete a mark only once no holder of an
// older token can still be running, for instance when the key is retired.
// Other keys must not start with "redlock:fence:{".
//
// Tokens must be between 1 and 2^53: the scripts compare tokens as Lua
// numbers, which are exact only up to 2^53. Tokens from [Lock.Token] stay
// below that until the year 2255.
//
// Each script is idempotent, so a client that retries a call after a network
// error never applies a stale write. A retried call can, however, report a
// stale token although its first attempt was applied, if a newer holder got
// in between.
//
// Its calls run on the client as it is: on a *redis.Client at go-redis
// defaults (ContextTimeoutEnabled false), a call to a server that does not
// answer ends at the client's read timeout, not when ctx ends. Set
// ContextTimeoutEnabled for ctx deadlines to bound them.
//
// A RedisFence is safe for concurrent use.
type RedisFence struct {
	client Client
}

// NewRedisFence returns a guard for keys in the Redis that client talks to:
// a standalone server, a Sentinel-managed one, a Cluster or a Ring. It
// returns an error if client is nil.
func NewRedisFence(client Client) (*RedisFence, error) {
	if client == nil {
		return nil, errors.New("redlock: NewRedisFence: nil client")
	}
	if v := reflect.ValueOf(client); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("redlock: NewRedisFence: nil %T", client)
	}
	return &RedisFence{client: client}, nil
}

// Admit registers token for key on entry to a critical section: it raises
// key's mark to token if token is higher, and writes nothing else. It
// returns a [*StaleTokenError], matching [ErrStaleToken], if a higher token
// was admitted for key before. It returns another error, having changed
// nothing, for an empty key, a token outside [1, 2^53] or a mark key that
// does not hold an integer, and for a failed call to Redis, after which the
// mark may or may not have been raised.
func (g *RedisFence) Admit(ctx context.Context, key string, token int64) error {
	if err := fenceCheck(key, token); err != nil {
		return err
	}
	return fenceRun(ctx, g.client, fenceAdmitScript, "admit", key, token,
		[]string{fenceMarkKey(key)}, strconv.FormatInt(token, 10))
}

// Set sets key to value if token is not stale, raising key's mark to token,
// atomically. ttl is the expiry of key: 0 for none, [redis.KeepTTL] to keep
// key's current expiry (Redis 6.0 and later), otherwise at least a
// millisecond (shorter is rounded up to one millisecond, longer is truncated
// to whole milliseconds, as go-redis's Set does). value is encoded as by
// go-redis's Set.
//
// Set returns a [*StaleTokenError], matching [ErrStaleToken], and writes
// nothing if a higher token was admitted for key before. It returns another
// error, having changed nothing, for an empty key, a token outside
// [1, 2^53], a negative ttl other than redis.KeepTTL, a value go-redis cannot
// encode or a mark key that does not hold an integer, and for a failed call
// to Redis, after which the write may or may not have been applied.
func (g *RedisFence) Set(ctx context.Context, key string, token int64, value any, ttl time.Duration) error {
	if err := fenceCheck(key, token); err != nil {
		return err
	}
	var ms int64
	switch {
	case ttl == redis.KeepTTL:
		ms = -1
	case ttl < 0:
		return fmt.Errorf("redlock: fence set %q: invalid ttl %v", key, ttl)
	case ttl > 0 && ttl < time.Millisecond:
		ms = 1
	default:
		ms = ttl.Milliseconds()
	}
	return fenceRun(ctx, g.client, fenceSetScript, "set", key, token,
		[]string{fenceMarkKey(key), key}, strconv.FormatInt(token, 10), value, ms)
}

// Del deletes key if token is not stale, raising key's mark to token,
// atomically. The mark stays, so a holder of an older token cannot
// re-create key. Deleting a key that does not exist is not an error.
//
// Del returns a [*StaleTokenError], matching [ErrStaleToken], and deletes
// nothing if a higher token was admitted for key before. It returns another
// error, having changed nothing, for an empty key, a token outside [1, 2^53]
// or a mark key that does not hold an integer, and for a failed call to
// Redis, after which key may or may not have been deleted.
func (g *RedisFence) Del(ctx context.Context, key string, token int64) error {
	if err := fenceCheck(key, token); err != nil {
		return err
	}
	return fenceRun(ctx, g.client, fenceDelScript, "del", key, token,
		[]string{fenceMarkKey(key), key}, strconv.FormatInt(token, 10))
}

// HSet sets field of the hash at key to value if token is not stale, raising
// key's mark to token, atomically. The mark guards the whole hash, not the
// field. value is encoded as by go-redis's HSet.
//
// HSet returns a [*StaleTokenError], matching [ErrStaleToken], and writes
// nothing if a higher token was admitted for key before. It returns another
// error, having changed nothing, for an empty key, a token outside
// [1, 2^53], a key holding something other than a hash, a value go-redis
// cannot encode or a mark key that does not hold an integer, and for a
// failed call to Redis, after which the write may or may not have been
// applied.
func (g *RedisFence) HSet(ctx context.Context, key, field string, token int64, value any) error {
	if err := fenceCheck(key, token); err != nil {
		return err
	}
	return fenceRun(ctx, g.client, fenceHSetScript, "hset", key, token,
		[]string{fenceMarkKey(key), key}, strconv.FormatInt(token, 10), field, value)
}

// Highest returns the highest token admitted for key, or 0 if none was. It
// returns an error for an empty key, a failed call to Redis, or a mark key
// that does not hold an integer.
func (g *RedisFence) Highest(ctx context.Context, key string) (int64, error) {
	if key == "" {
		return 0, errors.New("redlock: empty fence key")
	}
	// Client has no GET of its own; a one-command pipeline is routed by key
	// on every client kind, Cluster and Ring included.
	pipe := g.client.Pipeline()
	get := pipe.Get(ctx, fenceMarkKey(key))
	if _, err := pipe.Exec(ctx); err != nil {
		if errors.Is(err, redis.Nil) {
			return 0, nil
		}
		return 0, fmt.Errorf("redlock: fence highest %q: %w", key, err)
	}
	h, err := strconv.ParseInt(get.Val(), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("redlock: fence highest %q: mark key %q does not hold an integer: %w",
			key, fenceMarkKey(key), err)
	}
	return h, nil
}

// MarkKey returns the name of the key holding key's mark. It is
//
//	"redlock:fence:{" + tag + "}:" + key
//
// where tag is, in this order of preference:
//   - the hash tag of key, when key has one: the non-empty text between its
//     first '{' and the first '}' after that;
//   - key itself, when key has no hash tag and contains no '}';
//   - otherwise (key has no hash tag but a '}', like "}x" or "{}x", or is
//     empty) the base-36 form of the smallest integer n >= 0 whose slot
//     equals key's.
//
// Redis Cluster hashes the hash tag of a key if it has one, the whole key
// otherwise. In all three cases tag is non-empty, has no '}' and hashes as
// key does, and the mark key's hash tag is exactly tag, because the prefix
// holds no brace. So the mark key and key share a slot. A '}' can never be
// part of a hash tag, which is why the third case has to compute the slot.
// The name is also one-to-one: its first '}' ends tag, and key follows ":".
func (g *RedisFence) MarkKey(key string) string { return fenceMarkKey(key) }

// fenceMarkKey implements [RedisFence.MarkKey]. Its result must never change
// between versions: a process computing another name would see no mark and
// admit stale tokens.
func fenceMarkKey(key string) string {
	tag := fenceHashed(key)
	if tag == "" || strings.IndexByte(tag, '}') >= 0 {
		tag = fenceSlotTag(fenceSlot(key))
	}
	return fenceMarkPrefix + "{" + tag + "}:" + key
}

// fenceHashed returns the part of key that Redis Cluster hashes: the text
// between the first '{' and the first '}' after it if that is non-empty,
// the whole key otherwise.
func fenceHashed(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	n := strings.IndexByte(key[open+1:], '}')
	if n <= 0 { // no '}' after the '{', or the empty tag "{}"
		return key
	}
	return key[open+1 : open+1+n]
}

// fenceSlot returns the Redis Cluster slot of key, as CLUSTER KEYSLOT does.
func fenceSlot(key string) uint16 { return fenceCRC16(fenceHashed(key)) & 16383 }

// fenceCRC16 is the CRC-16 of Redis Cluster (XMODEM: polynomial 0x1021,
// initial value 0, no reflection, no final XOR). It runs only for keys that
// need a computed tag, so it favours brevity over a lookup table.
func fenceCRC16[T string | []byte](s T) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// fenceSlotTags maps each slot to the smallest n whose base-36 form hashes
// to it. Base-36 digits are [0-9a-z], so the tags hold no brace. It is built
// on first use, by a scan of fewer than 90,000 integers (TestFenceSlotTags
// logs the count), in a few milliseconds.
var fenceSlotTags = sync.OnceValue(func() *[16384]uint32 {
	var tags [16384]uint32
	var seen [16384]bool
	var buf [8]byte
	for n, left := uint32(0), len(tags); left > 0; n++ {
		slot := fenceCRC16(strconv.AppendUint(buf[:0], uint64(n), 36)) & 16383
		if !seen[slot] {
			seen[slot], tags[slot] = true, n
			left--
		}
	}
	return &tags
})

// fenceSlotTag returns a short hash tag, without braces, in slot.
func fenceSlotTag(slot uint16) string {
	return strconv.FormatUint(uint64(fenceSlotTags()[slot]), 36)
}

// fenceCheck validates the arguments common to RedisFence's methods.
func fenceCheck(key string, token int64) error {
	if key == "" {
		return errors.New("redlock: empty fence key")
	}
	if token < 1 || token > fenceMaxRedisToken {
		return fmt.Errorf("redlock: invalid fencing token %d for key %q: want 1 <= token <= 2^53", token, key)
	}
	return nil
}

// fenceRun runs one of the fence scripts, which reply {scripts.ReplyOK} when they
// admitted token and {scripts.ReplyStale, mark} when they rejected it.
func fenceRun(ctx context.Context, c Client, script *redis.Script, op, key string, token int64, keys []string, args ...any) error {
	reply, err := script.Run(ctx, c, keys, args...).Slice()
	if err != nil {
		return fmt.Errorf("redlock: fence %s %q: %w", op, key, err)
	}
	if len(reply) == 1 && reply[0] == int64(scripts.ReplyOK) {
		return nil
	}
	if len(reply) == 2 && reply[0] == int64(scripts.ReplyStale) {
		if mark, ok := reply[1].(string); ok {
			if h, err := strconv.ParseInt(mark, 10, 64); err == nil {
				return &StaleTokenError{Token: token, Highest: h}
			}
		}
	}
	return fmt.Errorf("redlock: fence %s %q: unexpected script reply %v", op, key, reply)
}
