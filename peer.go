package redlock

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// TakenError reports that another owner holds the lock: the error of a
// TryLock refused for that reason, and of a Lock that gave up (its retry
// policy ran out, or its context ended) after such a refusal, carries one;
// get it with errors.As. It matches ErrNotObtained. On a Redlock it
// describes the masters that refused.
type TakenError struct {
	// Name is the lock's name.
	Name string
	// Owner is the value the holder stored under the key (on the first
	// refusing master): its Lock.Owner, if it is a lock of this library.
	Owner string
	// TTL is the holder's remaining lease, the shortest among the refusing
	// masters, or negative when the key has no expiry.
	TTL time.Duration
	// Nodes are the indices of the refusing masters (0 for a Locker).
	Nodes []int
}

func (e *TakenError) Error() string {
	return fmt.Sprintf("redlock: lock %q held by owner %s for another %v", e.Name, e.Owner, e.TTL)
}

// Is reports whether target is ErrNotObtained.
func (e *TakenError) Is(target error) bool { return target == ErrNotObtained }

// appendTaken adds to errs a TakenError for the nodes in rs that refused
// because another owner held the key; hint is the shortest lease among them.
func appendTaken(errs []error, name string, rs []reply, hint time.Duration) []error {
	var te *TakenError
	for _, r := range rs {
		if r.err != nil || r.ok {
			continue
		}
		if te == nil {
			te = &TakenError{Name: name, Owner: r.holder, TTL: hint}
		}
		te.Nodes = append(te.Nodes, r.node)
	}
	if te == nil {
		return errs
	}
	return append(errs, te)
}

// acquireReply reads acquire.lua's reply: status and value, plus the
// holder's owner value on refusal.
func acquireReply(cmd *redis.Cmd) ([]int64, string, error) {
	vals, err := cmd.Slice()
	if err != nil {
		return nil, "", err
	}
	if len(vals) < 2 || len(vals) > 3 {
		return nil, "", fmt.Errorf("%w: %v", errBadReply, vals)
	}
	res := make([]int64, 2)
	for i := range res {
		v, ok := vals[i].(int64)
		if !ok {
			return nil, "", fmt.Errorf("%w: %v", errBadReply, vals)
		}
		res[i] = v
	}
	var holder string
	if len(vals) == 3 {
		holder, _ = vals[2].(string)
	}
	return res, holder, nil
}
