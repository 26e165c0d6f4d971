package redistest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProxyHold: replies are held, the commands behind them run, and
// Hold(false) delivers the held replies in order.
func TestProxyHold(t *testing.T) {
	t.Parallel()
	s := Start(t)
	p := NewProxy(t, s.Addr())
	c := dialRaw(t, p.Addr())
	c.send("PING")
	c.expectLine("+PONG")

	p.Hold(true)
	p.Hold(true) // idempotent
	c.send("SET held 1")
	c.send("ECHO second")
	c.expectTimeout(200 * time.Millisecond)
	// The command ran although its reply is held.
	assert.Equal(t, "1", s.Do(t, "GET", "held"))

	p.Hold(false)
	c.expectLine("+OK")
	c.expectLine("$6")
	c.expectLine("second")
	p.Hold(false) // idempotent
	c.send("PING")
	c.expectLine("+PONG")
}

// TestProxyHoldDroppedByCut: what is held when the connection is cut is
// never delivered, and the client sees its connection end.
func TestProxyHoldDroppedByCut(t *testing.T) {
	t.Parallel()
	s := Start(t)
	p := NewProxy(t, s.Addr())
	cl := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { _ = cl.Close() })
	ctx := ctxT(t)
	require.NoError(t, cl.Ping(ctx).Err())
	require.Equal(t, 1, p.Conns())

	p.Hold(true)
	res := make(chan error, 1)
	go func() { res <- cl.Incr(ctx, "cut").Err() }()
	// The INCR reached the server: its reply is what is held.
	require.NoError(t, waitFor(5*time.Second, func() error {
		if s.Do(t, "GET", "cut") != "1" {
			return errors.New("INCR not run yet")
		}
		return nil
	}))
	p.Cut()
	err := <-res
	require.Error(t, err, "INCR whose connection was cut mid-reply")
	p.Hold(false)
	// A new connection works, and sees the INCR's effect exactly once.
	v, err := cl.Get(ctx, "cut").Result()
	require.NoError(t, err)
	assert.Equal(t, "1", v)
}

// TestProxyCutResets: Cut ends every connection at once, including one
// waiting on a blocking command, and new connections work.
func TestProxyCutResets(t *testing.T) {
	t.Parallel()
	s := Start(t)
	p := NewProxy(t, s.Addr())
	cl := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { _ = cl.Close() })
	ctx := ctxT(t)
	res := make(chan error, 1)
	start := time.Now()
	go func() { res <- cl.BLPop(ctx, 10*time.Second, "never").Err() }()
	require.NoError(t, waitFor(5*time.Second, func() error {
		if !strings.Contains(s.Info(t, "clients"), "blocked_clients:1") {
			return errors.New("BLPOP not blocked yet")
		}
		return nil
	}))
	p.Cut()
	err := <-res
	require.Error(t, err)
	assert.False(t, errors.Is(err, redis.Nil), "BLPOP = %v, want a connection error", err)
	assert.Less(t, time.Since(start), 5*time.Second, "Cut did not end the blocked connection")
	require.NoError(t, cl.Ping(ctx).Err(), "PING on a new connection after Cut")
}

// TestPairFailoverLosesHeldWrite is the failover of the Redlock debate: a
// write acknowledged by the master, held back from the replica, is gone
// after the replica is promoted, while a write replicated before is kept.
// WAIT on the connection of the held write counts no replica.
func TestPairFailoverLosesHeldWrite(t *testing.T) {
	t.Parallel()
	p := StartPair(t)
	ctx := ctxT(t)
	master := p.Master.Client(t)
	require.NoError(t, master.Set(ctx, "kept", "1", 0).Err())
	p.WaitSynced(t)

	p.HoldReplication(true)
	// SET and WAIT on one connection: WAIT counts acks of its own
	// connection's writes.
	var acks *redis.IntCmd
	_, err := master.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, "lost", "1", 0)
		acks = redis.NewIntCmd(ctx, "WAIT", 1, 300)
		return pipe.Process(ctx, acks)
	})
	require.NoError(t, err)
	assert.Zero(t, acks.Val(), "WAIT 1 with replication held")
	assert.Equal(t, "1", p.Master.Do(t, "GET", "lost"))
	assert.Nil(t, p.Replica.Do(t, "GET", "lost"), "the held write reached the replica")

	p.Failover(t)
	assert.Equal(t, "1", p.Replica.Do(t, "GET", "kept"), "a replicated write lost in the failover")
	assert.Nil(t, p.Replica.Do(t, "GET", "lost"), "the held write survived the failover")
	// The promoted replica takes writes.
	assert.Equal(t, "OK", p.Replica.Do(t, "SET", "lost", "2"))
	assert.Error(t, master.Ping(ctx).Err(), "the old master is down")
}

// TestPairHoldReleased: a held replication stream is delivered when the
// hold ends, and WAIT then counts the replica.
func TestPairHoldReleased(t *testing.T) {
	t.Parallel()
	p := StartPair(t)
	ctx := ctxT(t)
	master := p.Master.Client(t)
	p.HoldReplication(true)
	require.NoError(t, master.Set(ctx, "late", "1", 0).Err())
	assert.Nil(t, p.Replica.Do(t, "GET", "late"))
	p.HoldReplication(false)
	p.WaitSynced(t)
	assert.Equal(t, "1", p.Replica.Do(t, "GET", "late"))
}

// TestPairSyncedWhileWritten: WaitSynced returns while the master is
// written every few milliseconds (as a held lock's renewals write it), with
// every write made before the call on the replica and acknowledged. The
// replica acknowledges once a second, so waiting for its acknowledgement to
// equal the master's moving offset could last until the test's deadline.
func TestPairSyncedWhileWritten(t *testing.T) {
	t.Parallel()
	p := StartPair(t)
	ctx := ctxT(t)
	master := p.Master.Client(t)
	require.NoError(t, master.Set(ctx, "before", "1", 0).Err())
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 100_000; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			if err := master.Set(ctx, "busy", i, 0).Err(); err != nil {
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()
	p.WaitSynced(t)
	assert.Equal(t, "1", p.Replica.Do(t, "GET", "before"), "a write made before WaitSynced is not on the replica")
}

// TestLaunchStop: a server not tied to a test, stopped by its owner.
func TestLaunchStop(t *testing.T) {
	t.Parallel()
	RequireRedisServer(t)
	s, err := Launch("--maxmemory", "10mb")
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Stop()) }()
	assert.Contains(t, s.Info(t, "server"), "redis_version:")
	assert.Contains(t, fmt.Sprint(s.Do(t, "CONFIG", "GET", "maxmemory")), "10485760", "extra arguments applied")
	require.NoError(t, s.Stop())
	require.NoError(t, s.Stop(), "second Stop")
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	assert.Error(t, c.Ping(ctx).Err(), "PING after Stop")
}
