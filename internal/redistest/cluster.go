package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of masters only, each a Server started as
// Start does with cluster mode on, the 16384 slots split evenly between
// them in order.
type Cluster struct {
	Masters []*Server
	ids     []string // CLUSTER MYID of each master
}

// clusterWait bounds how long the masters may take to agree on the
// cluster's shape, and a slot migration.
const clusterWait = 20 * time.Second

// StartCluster starts a cluster of n masters and returns once every master
// reports cluster_state:ok and knows every other. Cleanups registered on t
// stop the servers.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("redistest: StartCluster needs at least one master, got n=%d", n)
	}
	c := &Cluster{}
	for range n {
		c.Masters = append(c.Masters, Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000"))
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
	for _, s := range c.Masters[1:] {
		c.Masters[0].Do(t, "CLUSTER", "MEET", loopbackHost, s.port)
	}
	err := waitFor(clusterWait, func() error {
		for _, s := range c.Masters {
			info := s.Do(t, "CLUSTER", "INFO").(string)
			if !strings.Contains(info, "cluster_state:ok") || infoInt(info, "cluster_known_nodes") != int64(n) {
				return fmt.Errorf("%s: %s", s.Addr(), strings.Join(strings.Fields(info)[:3], " "))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redistest: cluster of %d not ready within %v: %v", n, clusterWait, err)
	}
	return c
}

// Client returns a cluster client of the masters, closed by a cleanup
// registered on t, with the timeouts and retries of Server.Client.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	addrs := make([]string, len(c.Masters))
	for i, s := range c.Masters {
		addrs[i] = s.Addr()
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
