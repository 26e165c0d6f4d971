package redistest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
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
// processed the master's whole replication stream, or fails the test after
// 10 seconds.
func (p *Pair) WaitSynced(t testing.TB) {
	t.Helper()
	err := waitFor(syncTimeout, func() error {
		ri, err := replicationFields(p.Replica)
		if err != nil {
			return err
		}
		if ri["role"] != "slave" || ri["master_link_status"] != "up" {
			return fmt.Errorf("replica %s: role %q, master link %q", p.Replica.Addr(), ri["role"], ri["master_link_status"])
		}
		mi, err := replicationFields(p.Master)
		if err != nil {
			return err
		}
		if ri["slave_repl_offset"] != mi["master_repl_offset"] {
			return fmt.Errorf("replica at offset %s, master at %s", ri["slave_repl_offset"], mi["master_repl_offset"])
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redistest: replica %s not in sync with master %s within %v: %v", p.Replica.Addr(), p.Master.Addr(), syncTimeout, err)
	}
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
