package redistest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster started by StartCluster: masters, each a
// Server started as Start does with cluster mode on, the 16384 slots split
// evenly between them in order, and, with WithClusterReplicas, one replica
// of each. When master i fails over, Masters[i] and Replicas[i] trade
// places, so that Masters always lists the masters serving the slots.
type Cluster struct {
	Masters []*Server
	// Replicas[i] replicates Masters[i]; nil without WithClusterReplicas.
	Replicas []*Server

	ids        []string         // CLUSTER MYID of each master
	replicaIDs []string         // of each replica
	down       map[*Server]bool // killed or paused by KillMaster or PauseMaster
}

// clusterWait bounds how long the masters may take to agree on the
// cluster's shape, a slot migration, and a failover.
const clusterWait = 20 * time.Second

// defaultClusterNodeTimeout is WithClusterNodeTimeout's default.
const defaultClusterNodeTimeout = 5 * time.Second

// replicationUser and replicationPassword are the ACL user that the
// replicas of a Cluster with replicas authenticate as (masteruser), so that
// CutReplication can lock them out.
const (
	replicationUser     = "repl"
	replicationPassword = "redistest-repl"
)

// ClusterOption changes a setting of StartCluster.
type ClusterOption func(*clusterSettings)

// clusterSettings are the settings ClusterOptions change.
type clusterSettings struct {
	replicas    bool
	nodeTimeout time.Duration
}

// WithClusterReplicas gives each master one replica, for failover tests:
// StartCluster returns once every node knows every replica's master and
// each replica is in sync.
func WithClusterReplicas() ClusterOption {
	return func(s *clusterSettings) { s.replicas = true }
}

// WithClusterNodeTimeout sets cluster-node-timeout, 5s by default: how long
// a master must be unreachable before it is failed over. A failover by the
// cluster itself (KillMaster, PauseMaster) takes about two of them.
func WithClusterNodeTimeout(d time.Duration) ClusterOption {
	return func(s *clusterSettings) { s.nodeTimeout = d }
}

// StartCluster starts a cluster of n masters and returns once every node
// reports cluster_state:ok, knows every other, and agrees on which nodes
// are masters and which replicate which. Cleanups registered on t stop the
// servers.
func StartCluster(t testing.TB, n int, opts ...ClusterOption) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("redistest: StartCluster needs at least one master, got n=%d", n)
	}
	set := clusterSettings{nodeTimeout: defaultClusterNodeTimeout}
	for _, o := range opts {
		o(&set)
	}
	args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(set.nodeTimeout.Milliseconds(), 10)}
	if set.replicas {
		args = append(args,
			// A replica whose link is down (CutReplication) is still
			// promoted, as the replica of the Redlock debate is.
			"--cluster-replica-validity-factor", "0",
			"--cluster-allow-replica-migration", "no",
			"--user", replicationUser, "on", ">"+replicationPassword, "~*", "&*", "+@all",
			"--masteruser", replicationUser, "--masterauth", replicationPassword)
	}
	c := &Cluster{down: make(map[*Server]bool)}
	for range n {
		c.Masters = append(c.Masters, startServerOn(t, "", args, freeClusterPort))
	}
	if set.replicas {
		for range n {
			c.Replicas = append(c.Replicas, startServerOn(t, "", args, freeClusterPort))
		}
	}
	nodes := append(slices.Clone(c.Masters), c.Replicas...)
	// Distinct config epochs, as redis-cli --cluster create sets them, and
	// only possible now: SET-CONFIG-EPOCH is refused once a node knows
	// another. A replica wins its master's slots only with an epoch above
	// every other claim to them; nodes left at epoch 0 sort out their
	// collisions over the bus, one bump per exchange, and a failover in the
	// meantime may claim the slots with an epoch that is not the highest.
	for i, s := range nodes {
		s.Do(t, "CLUSTER", "SET-CONFIG-EPOCH", i+1)
	}
	per := 16384 / n
	for i, s := range c.Masters {
		first, last := i*per, (i+1)*per-1
		if i == n-1 {
			last = 16383
		}
		s.Do(t, "CLUSTER", "ADDSLOTSRANGE", first, last)
		c.ids = append(c.ids, s.Do(t, "CLUSTER", "MYID").(string))
	}
	for _, s := range c.Replicas {
		c.replicaIDs = append(c.replicaIDs, s.Do(t, "CLUSTER", "MYID").(string))
	}
	for _, s := range nodes[1:] {
		c.Masters[0].Do(t, "CLUSTER", "MEET", loopbackHost, s.port)
	}
	if err := waitFor(clusterWait, c.allKnown); err != nil {
		t.Fatalf("redistest: cluster of %d nodes not ready within %v: %v", len(nodes), clusterWait, err)
	}
	for i, s := range c.Replicas {
		s.Do(t, "CLUSTER", "REPLICATE", c.ids[i])
	}
	c.waitAgreed(t, "start")
	for i := range c.Replicas {
		c.WaitSynced(t, i)
	}
	return c
}

// nodes returns every node of the cluster, masters first.
func (c *Cluster) nodes() []*Server { return append(slices.Clone(c.Masters), c.Replicas...) }

// allKnown checks that every node that is up reports cluster_state:ok and
// knows every node.
func (c *Cluster) allKnown() error {
	all := c.nodes()
	for _, s := range all {
		if c.down[s] {
			continue
		}
		info, err := clusterCmd(s, "CLUSTER", "INFO")
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") || infoInt(info, "cluster_known_nodes") != int64(len(all)) {
			return fmt.Errorf("%s: %s", s.Addr(), strings.Join(strings.Fields(info)[:3], " "))
		}
	}
	return nil
}

// agreed checks that every node that is up sees the shape c records:
// cluster_state:ok, Masters serving slots and no other node serving any,
// and each replica that is up replicating its master. This is what a
// manual failover needs before it starts (its master must know the replica
// as its own, or it ignores the replica's request, and the other masters
// must know it to vote), and what a failover is over with.
func (c *Cluster) agreed() error {
	if err := c.allKnown(); err != nil {
		return err
	}
	for _, s := range c.nodes() {
		if c.down[s] {
			continue
		}
		text, err := clusterCmd(s, "CLUSTER", "NODES")
		if err != nil {
			return err
		}
		seen := make(map[string][]string) // id -> flags, master, slots...
		for line := range strings.Lines(text) {
			if f := strings.Fields(line); len(f) >= 8 {
				seen[f[0]] = append([]string{f[2], f[3]}, f[8:]...)
			}
		}
		for i, id := range c.ids {
			if f := seen[id]; len(f) < 3 || !strings.Contains(f[0], "master") || strings.Contains(f[0], "fail") {
				return fmt.Errorf("%s sees master %d (%s) as %v", s.Addr(), i, id, f)
			}
		}
		for id, f := range seen {
			if len(f) > 2 && !slices.Contains(c.ids, id) {
				return fmt.Errorf("%s sees %s, not a master, serving slots %v", s.Addr(), id, f[2:])
			}
		}
		for i, id := range c.replicaIDs {
			if c.down[c.Replicas[i]] {
				continue
			}
			if f := seen[id]; len(f) < 2 || !strings.Contains(f[0], "slave") || f[1] != c.ids[i] {
				return fmt.Errorf("%s sees replica %d (%s) as %v, want a replica of %s", s.Addr(), i, id, f, c.ids[i])
			}
		}
	}
	return nil
}

// waitAgreed waits until agreed holds, or fails the test saying after what.
func (c *Cluster) waitAgreed(t testing.TB, after string) {
	t.Helper()
	if err := waitFor(clusterWait, c.agreed); err != nil {
		t.Fatalf("redistest: cluster not agreed on its shape within %v of %s: %v", clusterWait, after, err)
	}
}

// WaitSynced waits until replica i is linked to master i and has processed
// and acknowledged the master's replication stream up to the call (see
// Pair.WaitSynced), so that a failover now loses no write made before; it
// fails the test after 10 seconds.
func (c *Cluster) WaitSynced(t testing.TB, i int) {
	t.Helper()
	p := Pair{Master: c.Masters[i], Replica: c.Replicas[i]}
	p.WaitSynced(t)
}

// needReplica fails the test unless master i has a replica.
func (c *Cluster) needReplica(t testing.TB, op string, i int) {
	t.Helper()
	if i < 0 || i >= len(c.Replicas) {
		t.Fatalf("redistest: %s(%d): master %d has no replica (StartCluster needs WithClusterReplicas)", op, i, i)
	}
}

// Failover fails master i over to its replica as an operator does, with
// CLUSTER FAILOVER on the replica: the master stops accepting writes, the
// replica catches up with it, wins the other masters' votes and takes the
// slots, and the old master becomes its replica. No write is lost. It
// returns once every node agrees (Masters[i] is then the promoted replica,
// Replicas[i] the old master) and the old master is in sync.
//
// The failover starts only once the replica has caught up and every node
// knows it as master i's replica: a master ignores the failover request of
// a node it does not know as its own replica (and the failover times out
// after 5 s), and the other masters vote only for a replica they know.
func (c *Cluster) Failover(t testing.TB, i int) {
	t.Helper()
	c.needReplica(t, "Failover", i)
	c.waitAgreed(t, "the request for a failover")
	c.WaitSynced(t, i)
	c.Replicas[i].Do(t, "CLUSTER", "FAILOVER")
	c.swap(i)
	c.waitAgreed(t, fmt.Sprintf("CLUSTER FAILOVER of master %d", i))
	c.WaitSynced(t, i)
}

// KillMaster kills master i with SIGKILL and returns once the cluster has
// promoted its replica by itself (after cluster-node-timeout, the other
// masters mark the master failed and vote) and every other node agrees.
// Masters[i] is then the promoted replica; Replicas[i], the old master,
// stays down. Writes the replica had not received are lost.
func (c *Cluster) KillMaster(t testing.TB, i int) {
	t.Helper()
	c.failMaster(t, "KillMaster", "kill", i, (*Server).Kill)
}

// PauseMaster stops master i with SIGSTOP and returns once the cluster has
// promoted its replica, as KillMaster does. The old master, Replicas[i]
// now, stays stopped until Resume.
func (c *Cluster) PauseMaster(t testing.TB, i int) {
	t.Helper()
	c.failMaster(t, "PauseMaster", "pause", i, (*Server).Pause)
}

// failMaster takes master i down with fault and waits for its replica's
// promotion (KillMaster, PauseMaster; op names the caller, what the fault).
func (c *Cluster) failMaster(t testing.TB, op, what string, i int, fault func(*Server, testing.TB)) {
	t.Helper()
	c.needReplica(t, op, i)
	fault(c.Masters[i], t)
	c.down[c.Masters[i]] = true
	c.swap(i)
	c.waitAgreed(t, fmt.Sprintf("the %s of master %d", what, i))
}

// Resume continues the old master of slot range i, stopped by PauseMaster,
// and returns once it has learnt that it was failed over, has become a
// replica of the new master (dropping whatever it accepted alone) and is
// in sync.
func (c *Cluster) Resume(t testing.TB, i int) {
	t.Helper()
	c.needReplica(t, "Resume", i)
	c.Replicas[i].Resume(t)
	delete(c.down, c.Replicas[i])
	c.waitAgreed(t, fmt.Sprintf("the resume of the old master %d", i))
	c.WaitSynced(t, i)
}

// CutReplication stops the replication of master i's writes to its
// replica: the replica's user is disabled on the master and its link
// killed, so that it cannot reconnect. It returns once the replica reports
// its link down. The replica keeps what it had and can still be promoted,
// so a failover after CutReplication loses every write made since.
func (c *Cluster) CutReplication(t testing.TB, i int) {
	t.Helper()
	c.needReplica(t, "CutReplication", i)
	c.Masters[i].Do(t, "ACL", "SETUSER", replicationUser, "off")
	c.Masters[i].Do(t, "CLIENT", "KILL", "USER", replicationUser)
	err := waitFor(syncTimeout, func() error {
		ri, err := replicationFields(c.Replicas[i])
		if err == nil && ri["master_link_status"] != "down" {
			err = fmt.Errorf("replica %s: master link %q", c.Replicas[i].Addr(), ri["master_link_status"])
		}
		return err
	})
	if err != nil {
		t.Fatalf("redistest: CutReplication(%d): %v", i, err)
	}
}

// swap records that master i and its replica traded places.
func (c *Cluster) swap(i int) {
	c.Masters[i], c.Replicas[i] = c.Replicas[i], c.Masters[i]
	c.ids[i], c.replicaIDs[i] = c.replicaIDs[i], c.ids[i]
}

// clusterCmd runs one command whose reply is text on s, with the
// timeouts of an administrative connection, returning errors instead of
// failing a test, for the polls of a wait.
func clusterCmd(s *Server, args ...any) (string, error) {
	cl := adminClient(s.Addr())
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	v, err := cl.Do(ctx, args...).Text()
	if err != nil {
		return "", fmt.Errorf("%v on %s: %w", args, s.Addr(), err)
	}
	return v, nil
}

// Client returns a cluster client seeded with every node, closed by a
// cleanup registered on t, with the timeouts of Server.Client (go-redis's
// own redirections and retries stay on: they follow MOVED and ASK).
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	var addrs []string
	for _, s := range c.nodes() {
		addrs = append(addrs, s.Addr())
	}
	cl := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:        addrs,
		DialTimeout:  clientTimeout,
		ReadTimeout:  clientTimeout,
		WriteTimeout: clientTimeout,
	})
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// Owner returns the index of the master that serves slot, as the first
// master's CLUSTER SLOTS says.
func (c *Cluster) Owner(t testing.TB, slot int) int {
	t.Helper()
	slots, _ := c.Masters[0].Do(t, "CLUSTER", "SLOTS").([]any)
	for _, r := range slots {
		rng := r.([]any)
		if lo, hi := rng[0].(int64), rng[1].(int64); int64(slot) < lo || int64(slot) > hi {
			continue
		}
		port := rng[2].([]any)[1].(int64)
		for i, s := range c.Masters {
			if int64(s.port) == port {
				return i
			}
		}
	}
	t.Fatalf("redistest: no master serves slot %d", slot)
	return -1
}

// Migrate moves slot, with its keys, from master from to master to, the
// way redis-cli --cluster reshard does: IMPORTING and MIGRATING, MIGRATE
// of the keys, then SETSLOT NODE on every master.
func (c *Cluster) Migrate(t testing.TB, slot, from, to int) {
	t.Helper()
	c.BeginMigration(t, slot, from, to).Finish(t)
}

// Migration is a slot migration under way, which the test moves key by key
// in the order it chooses (Move), so that it can hold the slot in each
// phase: some keys of a name moved and some not (scripts that declare both
// get TRYAGAIN), all moved but the slot not handed over (ASK), handed over
// (Finish: MOVED).
type Migration struct {
	c              *Cluster
	slot, from, to int
}

// BeginMigration starts moving slot from master from to master to:
// IMPORTING on the target, MIGRATING on the source. No key moves yet.
func (c *Cluster) BeginMigration(t testing.TB, slot, from, to int) *Migration {
	t.Helper()
	c.Masters[to].Do(t, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.ids[from])
	c.Masters[from].Do(t, "CLUSTER", "SETSLOT", slot, "MIGRATING", c.ids[to])
	return &Migration{c: c, slot: slot, from: from, to: to}
}

// Move migrates keys to the target, one MIGRATE each, in the order given;
// a key that is not on the source (gone, or moved before) is skipped.
func (m *Migration) Move(t testing.TB, keys ...string) {
	t.Helper()
	src, dst := m.c.Masters[m.from], m.c.Masters[m.to]
	for _, k := range keys {
		src.Do(t, "MIGRATE", loopbackHost, dst.port, "", 0, 5000, "KEYS", k)
	}
}

// Left returns the keys of the slot still on the source.
func (m *Migration) Left(t testing.TB) []string {
	t.Helper()
	var left []string
	for range 100 { // bounded: a test's slot holds few keys
		keys, _ := m.c.Masters[m.from].Do(t, "CLUSTER", "GETKEYSINSLOT", m.slot, 1000).([]any)
		for _, k := range keys {
			left = append(left, k.(string))
		}
		if len(keys) < 1000 {
			break
		}
	}
	return left
}

// Finish moves every key left, up to 100 per MIGRATE, and hands the slot
// over: SETSLOT NODE on the target, the source, then the other masters.
func (m *Migration) Finish(t testing.TB) {
	t.Helper()
	src, dst := m.c.Masters[m.from], m.c.Masters[m.to]
	for range 10000 { // bounded: each round moves up to 100 keys
		keys, _ := src.Do(t, "CLUSTER", "GETKEYSINSLOT", m.slot, 100).([]any)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", loopbackHost, dst.port, "", 0, 5000, "KEYS"}
		src.Do(t, append(args, keys...)...)
	}
	for _, s := range []*Server{dst, src} {
		s.Do(t, "CLUSTER", "SETSLOT", m.slot, "NODE", m.c.ids[m.to])
	}
	for i, s := range m.c.Masters {
		if i != m.from && i != m.to {
			s.Do(t, "CLUSTER", "SETSLOT", m.slot, "NODE", m.c.ids[m.to])
		}
	}
}

// PublishSent is the sum over the masters of CLUSTER INFO's
// cluster_stats_messages_publish_sent: the PUBLISH messages the cluster bus
// carried.
func (c *Cluster) PublishSent(t testing.TB) int64 {
	t.Helper()
	var sum int64
	for _, s := range c.Masters {
		sum += infoInt(s.Do(t, "CLUSTER", "INFO").(string), "cluster_stats_messages_publish_sent")
	}
	return sum
}

// infoInt reads one integer field of an INFO-like text; 0 if absent.
func infoInt(info, field string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
