package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/node"
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
func ackPipeline(ctx context.Context, cl node.Client, key string) (redis.Pipeliner, error) {
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

// allClusters reports that every client is a *redis.ClusterClient: the
// releases then publish with SPUBLISH (sharded pub/sub), which keeps each
// message on the shard of its channel's slot, and waiters SSUBSCRIBE.
func allClusters(clients []node.Client) bool {
	for _, cl := range clients {
		if _, ok := cl.(*redis.ClusterClient); !ok {
			return false
		}
	}
	return len(clients) > 0
}

// KeyRouted reports a client whose pipelines spread over several servers by
// key, so that one WAIT per pipeline does not cover every script in it.
func KeyRouted(cl node.Client) bool {
	switch cl.(type) {
	case *redis.ClusterClient, *redis.Ring:
		return true
	}
	return false
}

// AckTimeout is WAIT's timeout for this lock's writes (WithReplicaAcks).
func ackTimeout(l *Hold) time.Duration { return time.Duration(l.ackMillis) * time.Millisecond }

// scriptAcked runs script and then WAIT replicas timeout on the same
// connection. It returns the script's command, and an error when the
// script succeeded but WAIT failed or counted fewer than replicas
// acknowledgements (a *ReplicaAcksError). A NOSCRIPT is answered by EVAL and
// a WAIT of its own, on the connection that EVAL ran on.
func scriptAcked(ctx context.Context, cl node.Client, script *redis.Script, keys []string, replicas int, timeout time.Duration, args ...any) (*redis.Cmd, error) {
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
	if node.IsNoScript(cmd.Err()) {
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
		return Say.ReplicaAcks(int(n), replicas, timeout)
	}
	return nil
}
