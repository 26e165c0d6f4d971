package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// WAIT counts the replicas that acknowledged the last write of the
// connection it is sent on. go-redis hands out pooled connections, and a
// pipeline's connection is not a single command's, so a WAIT sent on its
// own after a script may land on a connection that wrote nothing lately and
// answer "all replicas" at once while replication is stalled. A script and
// its WAIT therefore travel in one pipeline, which go-redis writes on one
// connection. (Not in MULTI, where WAIT does not block; not in the script,
// where Redis refuses WAIT.)

// ackPipeline returns a pipeline on one connection to the master that holds
// key: the client's own for a single-server client (a Sentinel failover
// client included), the key's shard's for a Cluster or Ring client, whose
// pipelines would send a keyless WAIT to an arbitrary shard.
func ackPipeline(ctx context.Context, cl Client, key string) (redis.Pipeliner, error) {
	switch c := cl.(type) {
	case *redis.ClusterClient:
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return m.Pipeline(), nil
	case *redis.Ring:
		m, err := c.GetShardClientForKey(key)
		if err != nil {
			return nil, err
		}
		return m.Pipeline(), nil
	}
	return cl.Pipeline(), nil
}

// keyRouted reports a client whose pipelines spread over several servers by
// key, so that one WAIT per pipeline does not cover every script in it.
func keyRouted(cl Client) bool {
	switch cl.(type) {
	case *redis.ClusterClient, *redis.Ring:
		return true
	}
	return false
}

// scriptAcked runs script and then WAIT replicas timeout on the same
// connection. It returns the script's command, and an error when the
// script succeeded but WAIT failed or counted fewer than replicas
// acknowledgements (a *ReplicaAcksError). A NOSCRIPT is answered by EVAL and
// a WAIT of its own, on the connection that EVAL ran on.
func scriptAcked(ctx context.Context, cl Client, script *redis.Script, keys []string, replicas int, timeout time.Duration, args ...any) (*redis.Cmd, error) {
	run := func(eval func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd) (*redis.Cmd, *redis.Cmd) {
		pipe, err := ackPipeline(ctx, cl, keys[0])
		if err != nil {
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(err)
			return cmd, nil
		}
		cmd := eval(ctx, pipe, keys, args...)
		wait := waitCmd(ctx, pipe, replicas, timeout)
		_, _ = pipe.Exec(ctx) // errors are read per command
		return cmd, wait
	}
	cmd, wait := run(script.EvalSha)
	if isNoScript(cmd.Err()) {
		cmd, wait = run(script.Eval)
	}
	if cmd.Err() != nil {
		return cmd, nil // the script's own error speaks for the call
	}
	return cmd, ackError(wait, replicas, timeout)
}

// waitCmd queues WAIT on pipe. timeout is at least 1ms (validate): WAIT 0
// would block until the replicas answer, however long that takes.
func waitCmd(ctx context.Context, pipe redis.Pipeliner, replicas int, timeout time.Duration) *redis.Cmd {
	return pipe.Do(ctx, "wait", replicas, timeout.Milliseconds())
}

// ackError reads a WAIT's answer against the replicas asked for.
func ackError(wait *redis.Cmd, replicas int, timeout time.Duration) error {
	n, err := wait.Int64()
	switch {
	case err != nil:
		return fmt.Errorf("redlock: WAIT %d %v: %w", replicas, timeout, err)
	case n < int64(replicas):
		return &ReplicaAcksError{Acked: int(n), Wanted: replicas, Timeout: timeout}
	}
	return nil
}

// batchAcks returns the replicas and timeout of the one WAIT a renewal batch
// sends per node: the largest asked for by any of its locks, so that the
// count answers every lock (each compares it with its own replicas).
func batchAcks(locks []*Lock) (int, time.Duration) {
	var replicas int
	var timeout time.Duration
	for _, l := range locks {
		if l.replicas > 0 {
			replicas = max(replicas, int(l.replicas))
			timeout = max(timeout, l.ackTimeout())
		}
	}
	return replicas, timeout
}

// renewAcked renews each lock on its own connection with its own WAIT: the
// path of a Cluster or Ring client, whose pipelines span shards. Slower than
// one pipeline, but only locks that asked for acks pay for it.
func renewAcked(ctx context.Context, cl Client, locks []*Lock, ttls []time.Duration) ([]int8, error) {
	codes := make([]int8, len(locks))
	var firstErr error
	for i, l := range locks {
		var v int64
		var err error
		if l.replicas > 0 {
			var cmd *redis.Cmd
			var ackErr error
			s, keys, args := l.extendCmd(0, ttls[i])
			cmd, ackErr = scriptAcked(ctx, cl, s, keys, int(l.replicas), l.ackTimeout(), args...)
			v, err = cmd.Int64()
			if err == nil && v == replyOK && ackErr != nil {
				err = ackErr
			}
		} else {
			v, err = l.runParts(ctx, cl, func(p int) (*redis.Script, []string, []any) { return l.extendCmd(p, ttls[i]) }, foldExtend)
		}
		codes[i] = extendCode(v, err)
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return codes, firstErr
}

// extendCode is a renewal's per-lock code in a batch: 1 extended, replyTaken
// another owner's, replyLate too near its end, 0 missing, -1 error.
func extendCode(v int64, err error) int8 {
	switch {
	case err != nil:
		return -1
	case v == replyOK:
		return 1
	case v == replyTaken, v == replyLate:
		return int8(v)
	}
	return 0
}
