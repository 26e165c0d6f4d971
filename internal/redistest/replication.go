package redistest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// syncTimeout bounds the waits of a Pair for its replica to link up and
// catch up. Linking takes some 200 ms with diskless sync and no delay.
const syncTimeout = 10 * time.Second

// Pair is a master and a replica of it whose replication link runs through
// a Proxy, so that a test can hold the replication stream back and then
// fail over to a replica that missed a write: the failover of the Redlock
// debate, without Sentinel's timing. Started by StartPair.
type Pair struct {
	Master  *Server
	Replica *Server
	// Link is the proxy the replica replicates through (the replica is its
	// client, the master its target). Link.Hold holds the replication
	// stream back, Link.Blackhole drops it.
	Link *Proxy
}

// StartPair starts a master and a replica as Start does (extra applies to
// both), the replica replicating from the master through a Proxy, and
// returns once the replica is linked and in sync. Cleanups registered on t
// stop everything.
func StartPair(t testing.TB, extra ...string) *Pair {
	t.Helper()
	master := Start(t, extra...)
	link := NewProxy(t, master.Addr())
	host, port, _ := net.SplitHostPort(link.Addr())
	replica := Start(t, append(slices.Clone(extra), "--replicaof", host, port)...)
	p := &Pair{Master: master, Replica: replica, Link: link}
	p.WaitSynced(t)
	return p
}

// HoldReplication holds the replication stream back (on) or lets it flow
// again and delivers what was held (off); see Proxy.Hold. While it is held,
// writes on the master are not on the replica, and WAIT on the connection
// that made them counts no replica.
func (p *Pair) HoldReplication(on bool) { p.Link.Hold(on) }

// WaitSynced waits until the replica is linked to the master and has
// processed, and acknowledged, the master's replication stream up to where
// it was when the link was found up, or fails the test after 10 seconds.
// Writes made meanwhile (a held lock's renewals) need not be in: a replica
// acknowledges once a second, so a master written more often than that is
// seldom seen with its replica's acknowledgement at its own offset.
func (p *Pair) WaitSynced(t testing.TB) {
	t.Helper()
	target := int64(-1)
	err := waitFor(syncTimeout, func() error {
		ri, err := replicationFields(p.Replica)
		if err != nil {
			return err
		}
		if ri["role"] != "slave" || ri["master_link_status"] != "up" {
			return fmt.Errorf("replica %s: role %q, master link %q", p.Replica.Addr(), ri["role"], ri["master_link_status"])
		}
		if target < 0 {
			if err := masterStreams(p.Master); err != nil {
				return err
			}
			mi, err := replicationFields(p.Master)
			if err != nil {
				return err
			}
			if target, err = offset(mi["master_repl_offset"]); err != nil {
				return fmt.Errorf("master_repl_offset of %s: %w", p.Master.Addr(), err)
			}
		}
		if have, err := offset(ri["slave_repl_offset"]); err != nil || have < target {
			return fmt.Errorf("replica at offset %q, master at %d when the link was up", ri["slave_repl_offset"], target)
		}
		// What WAIT counts: the offset the replica acknowledged, as the
		// master knows it ("slave0:...,offset=N,...").
		mi, err := replicationFields(p.Master)
		if err != nil {
			return err
		}
		if acked, err := offset(field(mi["slave0"], "offset")); err != nil || acked < target {
			return fmt.Errorf("master at offset %d when the link was up, its replica's acknowledgement at %q", target, field(mi["slave0"], "offset"))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redistest: replica %s not in sync with master %s within %v: %v", p.Replica.Addr(), p.Master.Addr(), syncTimeout, err)
	}
}

// offset parses a replication offset of INFO replication.
func offset(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }

// field returns the value of name in an INFO line of "name=value" pairs
// separated by commas, "" if it has none.
func field(line, name string) string {
	for kv := range strings.SplitSeq(line, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// Failover does by hand what Sentinel would do after a crash of the
// master: it cuts the replication link, dropping anything held back, so
// that the replica keeps only what it had received, kills the master with
// SIGKILL, and promotes the replica with REPLICAOF NO ONE. It returns once
// the replica answers ROLE as a master. Writes the replica had not received
// are lost, fencing counters included. The old master stays down; clients
// of its address get connection errors.
func (p *Pair) Failover(t testing.TB) {
	t.Helper()
	p.Link.Close()
	p.Master.Kill(t)
	p.Replica.Do(t, "REPLICAOF", "NO", "ONE")
	err := waitFor(syncTimeout, func() error {
		role, err := serverRole(p.Replica)
		if err == nil && role != "master" {
			err = fmt.Errorf("ROLE %s", role)
		}
		return err
	})
	if err != nil {
		t.Fatalf("redistest: Failover: %s not promoted: %v", p.Replica.Addr(), err)
	}
}

// replicationFields returns the fields of INFO replication on s.
func replicationFields(s *Server) (map[string]string, error) {
	c := adminClient(s.Addr())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	text, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO replication on %s: %w", s.Addr(), err)
	}
	fields := make(map[string]string)
	for line := range strings.Lines(text) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields, nil
}

// masterStreams checks that the master streams its writes to the replica
// and WAIT counts its acknowledgement. A replica in sync by the offsets may
// still not get the master's new writes: after a full sync Redis starts the
// stream at the replica's first REPLCONF ACK, which it sends once a second;
// until then a lock taken with WithReplicaAcks gets no ack. A PUBLISH is
// replicated but writes no key, so the check leaves nothing in the
// keyspace; the REPLCONF GETACK that a blocked WAIT sends moves the
// master's offset, which WaitSynced then waits for the replica to
// acknowledge.
func masterStreams(master *Server) error {
	c := adminClient(master.Addr())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	var wait *redis.Cmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Publish(ctx, "redistest:synced", "1")
		wait = p.Do(ctx, "wait", 1, 50)
		return nil
	})
	if err != nil {
		return fmt.Errorf("PUBLISH and WAIT on %s: %w", master.Addr(), err)
	}
	if n, _ := wait.Int64(); n < 1 {
		return fmt.Errorf("master %s: its replica does not acknowledge writes yet", master.Addr())
	}
	return nil
}

// serverRole returns the first element of s's ROLE reply.
func serverRole(s *Server) (string, error) {
	c := adminClient(s.Addr())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	reply, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", err
	}
	if len(reply) == 0 {
		return "", fmt.Errorf("empty ROLE reply")
	}
	role, _ := reply[0].(string)
	return role, nil
}
