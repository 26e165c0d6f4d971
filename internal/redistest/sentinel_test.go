package redistest

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// roleOf returns the first element of s's ROLE reply.
func roleOf(t testing.TB, s *Server) string {
	t.Helper()
	reply, ok := s.Do(t, "ROLE").([]any)
	if !ok || len(reply) == 0 {
		t.Fatalf("ROLE on %s = %#v", s.Addr(), reply)
	}
	role, _ := reply[0].(string)
	return role
}

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	// Every failover here is asked for (SENTINEL FAILOVER), none detected:
	// a long down-after keeps a loaded machine's slow replies from making
	// the sentinels fail over by themselves in between (the old master then
	// turned master again before the failover back).
	g := StartSentinel(t, WithDownAfter(10*time.Second))

	if g.MasterName() != "mymaster" {
		t.Errorf("MasterName() = %q, want mymaster", g.MasterName())
	}
	addrs := g.SentinelAddrs()
	if len(addrs) != 1 {
		t.Fatalf("SentinelAddrs() = %q, want one address", addrs)
	}
	if host, port, err := net.SplitHostPort(addrs[0]); err != nil || host != "127.0.0.1" || port == "6379" {
		t.Fatalf("sentinel address %q, want 127.0.0.1 and a port other than 6379", addrs[0])
	}
	m0, r0 := g.Master(t), g.Replica(t)
	if m0 == r0 {
		t.Fatalf("Master() and Replica() are both %s", m0.Addr())
	}
	if got := roleOf(t, m0); got != "master" {
		t.Fatalf("master %s has ROLE %s", m0.Addr(), got)
	}
	if got := roleOf(t, r0); got != "slave" {
		t.Fatalf("replica %s has ROLE %s", r0.Addr(), got)
	}

	ctx := ctxT(t)
	c := g.FailoverClient(t, nil)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the failover client: %v", err)
	}
	sub := c.Subscribe(ctx, "ch")
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatalf("SUBSCRIBE through the failover client: %v", err)
	}
	if got := m0.Do(t, "GET", "k"); got != "v" {
		t.Fatalf("GET k on the master = %#v, want \"v\"", got)
	}

	start := time.Now()
	g.Failover(t)
	t.Logf("Failover took %v", time.Since(start))

	if got := g.Master(t); got != r0 {
		t.Fatalf("after Failover, Master() = %s, want the old replica %s", got.Addr(), r0.Addr())
	}
	if got := g.Replica(t); got != m0 {
		t.Fatalf("after Failover, Replica() = %s, want the old master %s", got.Addr(), m0.Addr())
	}
	if got := roleOf(t, r0); got != "master" {
		t.Fatalf("new master %s has ROLE %s", r0.Addr(), got)
	}
	if got := r0.Do(t, "GET", "k"); got != "v" {
		t.Fatalf("GET k on the new master = %#v, want \"v\"", got)
	}
	// A client created now asks the sentinels and finds the new master.
	if err := g.FailoverClient(t, nil).Set(ctx, "k2", "v2", 0).Err(); err != nil {
		t.Fatalf("SET through a new failover client: %v", err)
	}
	if got := r0.Do(t, "GET", "k2"); got != "v2" {
		t.Fatalf("GET k2 on the new master = %#v, want \"v2\"", got)
	}

	// Without waiting for the sentinels, the old master becomes a replica
	// of the new one, and can take over again.
	start = time.Now()
	g.SyncReplica(t)
	t.Logf("SyncReplica took %v", time.Since(start))
	if got := roleOf(t, m0); got != "slave" {
		t.Fatalf("after SyncReplica, old master %s has ROLE %s", m0.Addr(), got)
	}
	if got := m0.Do(t, "GET", "k2"); got != "v2" {
		t.Fatalf("after SyncReplica, GET k2 on the old master = %#v, want \"v2\"", got)
	}
	// SyncReplica disconnected the subscriber from the old master, and
	// go-redis subscribed again on the new one. (Without SyncReplica the
	// subscriber would stay on the old master until the sentinels
	// reconfigure it.)
	msgs := sub.Channel()
	err := waitFor(5*time.Second, func() error {
		r0.Do(t, "PUBLISH", "ch", "m")
		select {
		case <-msgs:
			return nil
		default:
			return errors.New("no message received")
		}
	})
	if err != nil {
		t.Fatalf("subscriber did not move to the new master: %v", err)
	}
	if got := r0.Do(t, "PUBSUB", "NUMSUB", "ch"); fmt.Sprint(got) != "[ch 1]" {
		t.Fatalf("PUBSUB NUMSUB ch on the new master = %v, want [ch 1]", got)
	}
	start = time.Now()
	g.Failover(t)
	t.Logf("Failover back took %v", time.Since(start))
	if got := g.Master(t); got != m0 {
		t.Fatalf("after failing back, Master() = %s, want %s", got.Addr(), m0.Addr())
	}
}

func TestSentinelKillMaster(t *testing.T) {
	t.Parallel()
	g := StartSentinel(t)
	m0, r0 := g.Master(t), g.Replica(t)

	ctx := ctxT(t)
	c := m0.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	// KillMaster does not wait for the replica to catch up.
	if n, err := c.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v; want 1", n, err)
	}

	start := time.Now()
	g.KillMaster(t)
	t.Logf("KillMaster took %v", time.Since(start))

	if got := g.Master(t); got != r0 {
		t.Fatalf("after KillMaster, Master() = %s, want the old replica %s", got.Addr(), r0.Addr())
	}
	if got := roleOf(t, r0); got != "master" {
		t.Fatalf("new master %s has ROLE %s", r0.Addr(), got)
	}
	if got := r0.Do(t, "GET", "k"); got != "v" {
		t.Fatalf("GET k on the new master = %#v, want \"v\"", got)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("the killed master still answers")
	}

	// The killed server comes back empty, and SyncReplica makes it a
	// replica of the new master.
	if got := g.Replica(t); got != m0 {
		t.Fatalf("after KillMaster, Replica() = %s, want the killed master %s", got.Addr(), m0.Addr())
	}
	// Failing over to a server that is down fails at once.
	if rec := runRecording(t, g.Failover); !rec.fatal || !strings.Contains(rec.msg, "is down") {
		t.Fatalf("Failover with the replica down: fatal=%v msg=%q, want a failure naming it down", rec.fatal, rec.msg)
	}
	m0.Restart(t)
	g.SyncReplica(t)
	if got := roleOf(t, m0); got != "slave" {
		t.Fatalf("restarted old master %s has ROLE %s", m0.Addr(), got)
	}
	if got := m0.Do(t, "GET", "k"); got != "v" {
		t.Fatalf("GET k on the restarted old master = %#v, want \"v\"", got)
	}
}

func TestSentinelThreeSentinels(t *testing.T) {
	t.Parallel()
	start := time.Now()
	g := StartSentinel(t, WithSentinels(3))
	t.Logf("StartSentinel with 3 sentinels took %v", time.Since(start))
	if n := len(g.SentinelAddrs()); n != 3 {
		t.Fatalf("SentinelAddrs() has %d addresses, want 3", n)
	}
	r0 := g.Replica(t)

	start = time.Now()
	g.KillMaster(t)
	t.Logf("KillMaster took %v", time.Since(start))
	if got := g.Master(t); got != r0 {
		t.Fatalf("after KillMaster, Master() = %s, want %s", got.Addr(), r0.Addr())
	}
}

func TestStartSentinelRejectsBadOptions(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]SentinelOption{
		"no sentinels":   {WithSentinels(0)},
		"quorum too big": {WithSentinels(3), WithQuorum(4)},
		"quorum zero":    {WithQuorum(-1)},
		"down-after":     {WithDownAfter(0)},
	} {
		t.Run(name, func(t *testing.T) {
			rec := runRecording(t, func(tb testing.TB) { StartSentinel(tb, opts...) })
			if !rec.fatal || !strings.Contains(rec.msg, "StartSentinel") {
				t.Fatalf("fatal=%v msg=%q, want a StartSentinel failure", rec.fatal, rec.msg)
			}
		})
	}
}

func TestFailoverClientKeepsOptions(t *testing.T) {
	t.Parallel()
	g := StartSentinel(t)
	opts := &redis.FailoverOptions{MasterName: "other", DB: 1}
	c := g.FailoverClient(t, opts)
	if opts.MasterName != "other" || opts.SentinelAddrs != nil {
		t.Fatalf("FailoverClient modified its options: %+v", opts)
	}
	ctx := ctxT(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	// Do uses database 0; the key must be in database 1.
	if got := g.Master(t).Do(t, "GET", "k"); got != nil {
		t.Fatalf("GET k in database 0 = %#v, want nil: the DB option was ignored", got)
	}
}
