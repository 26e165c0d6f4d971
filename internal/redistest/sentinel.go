package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// sentinelMasterName is the name under which the sentinels of a
	// SentinelGroup monitor its master.
	sentinelMasterName = "mymaster"

	// defaultDownAfter is the default of WithDownAfter: how long the
	// master must be unreachable before a sentinel considers it down.
	defaultDownAfter = 500 * time.Millisecond

	// sentinelFailoverTimeout is the sentinels' failover-timeout. A
	// failover must see the replica promoted within it, which takes up to
	// a second (the period of INFO during a failover), and after an
	// attempt that did not complete a sentinel waits twice as long before
	// it tries again.
	sentinelFailoverTimeout = 2 * time.Second

	// failoverWait bounds the wait in Failover, KillMaster and SyncReplica
	// for the group to reach the state they promise. A failover normally
	// completes within two seconds, but reconfiguring the old master takes
	// the sentinels some ten seconds.
	failoverWait = 20 * time.Second

	// groupSetupTimeout bounds each wait of StartSentinel: for the replica
	// to synchronise, and for the sentinels to find the replica and each
	// other (they announce themselves every two seconds).
	groupSetupTimeout = 10 * time.Second

	// groupPollInterval is how often the waits of a SentinelGroup check
	// its state. A failover takes seconds, so checking more often would
	// only load the servers and sentinels.
	groupPollInterval = 20 * time.Millisecond
)

// SentinelGroup is a master, a replica and the sentinels monitoring them,
// all started by StartSentinel on free ports of 127.0.0.1, for failover
// tests. Which of the two servers is the master changes with failovers;
// Master and Replica ask the sentinels.
type SentinelGroup struct {
	servers   [2]*Server
	sentinels []*Server

	// Administrative connections, closed by a cleanup before the servers
	// are killed. clients is indexed like servers.
	clients         [2]*redis.Client
	sentinelClients []*redis.SentinelClient
}

// SentinelOption changes a setting of StartSentinel.
type SentinelOption func(*sentinelSettings)

// sentinelSettings are the settings SentinelOptions change.
type sentinelSettings struct {
	sentinels int
	quorum    int // 0 for a majority of the sentinels
	downAfter time.Duration
}

// WithSentinels sets the number of sentinels, 1 by default. With more than
// one, StartSentinel waits until every sentinel knows all the others (they
// announce themselves every two seconds), so that they can agree that the
// master is down and elect a leader for the failover.
func WithSentinels(n int) SentinelOption {
	return func(s *sentinelSettings) { s.sentinels = n }
}

// WithQuorum sets the number of sentinels that must consider the master
// unreachable before a failover starts. By default it is a majority of the
// sentinels. Whatever the quorum, a majority of the sentinels must elect
// the sentinel that performs the failover.
func WithQuorum(q int) SentinelOption {
	return func(s *sentinelSettings) { s.quorum = q }
}

// WithDownAfter sets how long the master must fail to answer before a
// sentinel considers it down (down-after-milliseconds), 500 ms by default.
// Pausing the master for longer than this makes the sentinels fail over.
func WithDownAfter(d time.Duration) SentinelOption {
	return func(s *sentinelSettings) { s.downAfter = d }
}

// StartSentinel starts a master and a replica of it as Start does, waits
// until the replica is in sync, then starts the sentinels (one unless
// WithSentinels says otherwise) monitoring the master under MasterName,
// and returns once every sentinel knows the master and the replica, and
// the other sentinels.
//
// The sentinels have short timeouts, so that a failover completes within
// a few seconds: see WithDownAfter for failure detection, and Failover
// and KillMaster. Everything listens on 127.0.0.1 only, and cleanups
// registered on t kill every process.
func StartSentinel(t testing.TB, opts ...SentinelOption) *SentinelGroup {
	t.Helper()
	set := sentinelSettings{sentinels: 1, downAfter: defaultDownAfter}
	for _, o := range opts {
		o(&set)
	}
	if set.sentinels < 1 {
		t.Fatalf("redistest: StartSentinel needs at least one sentinel, got %d", set.sentinels)
	}
	if set.quorum == 0 {
		set.quorum = set.sentinels/2 + 1
	}
	if set.quorum < 1 || set.quorum > set.sentinels {
		t.Fatalf("redistest: StartSentinel: quorum %d is not between 1 and the %d sentinels", set.quorum, set.sentinels)
	}
	if set.downAfter < time.Millisecond {
		t.Fatalf("redistest: StartSentinel: down-after %v is shorter than a millisecond", set.downAfter)
	}

	g := &SentinelGroup{}
	// The replica is made one with REPLICAOF rather than --replicaof, so
	// that Restart, which reuses the arguments, never brings a server back
	// as the replica of whichever server was master at the start.
	g.servers[0], g.servers[1] = Start(t), Start(t)
	for i, s := range g.servers {
		g.clients[i] = adminClient(s.Addr())
	}
	t.Cleanup(g.closeClients)
	master, replica := g.servers[0], g.servers[1]
	if err := g.clientOf(replica).ReplicaOf(ctxWithTimeout(t), loopbackHost, strconv.Itoa(master.port)).Err(); err != nil {
		t.Fatalf("redistest: REPLICAOF on %s: %v", replica.Addr(), err)
	}
	if err := waitFor(groupSetupTimeout, func() error { return g.inSync(master, replica) }); err != nil {
		t.Fatalf("redistest: StartSentinel: replica did not synchronise within %v: %v", groupSetupTimeout, err)
	}

	conf := sentinelConf(master, set)
	for range set.sentinels {
		s := startServer(t, conf, []string{"--sentinel"})
		g.sentinels = append(g.sentinels, s)
		g.sentinelClients = append(g.sentinelClients, redis.NewSentinelClient(adminOptions(s.Addr())))
	}
	err := waitFor(groupSetupTimeout, func() error {
		return g.eachSentinel(func(sc *redis.SentinelClient) error {
			return g.sentinelReady(sc, master, replica, set.sentinels)
		})
	})
	if err != nil {
		t.Fatalf("redistest: StartSentinel: sentinels not ready within %v: %v", groupSetupTimeout, err)
	}
	return g
}

// sentinelConf returns the configuration file of a sentinel monitoring
// master. The port, bind address and directory come from the command
// line (see startProcess).
func sentinelConf(master *Server, set sentinelSettings) string {
	var b strings.Builder
	line := func(args ...any) { fmt.Fprintln(&b, args...) }
	// Addresses stay numeric and on the loopback interface: the sentinels
	// announce themselves as 127.0.0.1 to each other and to clients.
	line("sentinel resolve-hostnames no")
	line("sentinel announce-ip", loopbackHost)
	// The master must be declared before its settings.
	line("sentinel monitor", sentinelMasterName, loopbackHost, master.port, set.quorum)
	line("sentinel down-after-milliseconds", sentinelMasterName, set.downAfter.Milliseconds())
	line("sentinel failover-timeout", sentinelMasterName, sentinelFailoverTimeout.Milliseconds())
	line("sentinel parallel-syncs", sentinelMasterName, 1)
	return b.String()
}

// MasterName returns the name under which the sentinels monitor the
// master, for redis.FailoverOptions.MasterName.
func (g *SentinelGroup) MasterName() string {
	return sentinelMasterName
}

// SentinelAddrs returns the addresses of the sentinels, "127.0.0.1:PORT",
// for redis.FailoverOptions.SentinelAddrs.
func (g *SentinelGroup) SentinelAddrs() []string {
	addrs := make([]string, len(g.sentinels))
	for i, s := range g.sentinels {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Master returns the server that the first sentinel reports as master
// (SENTINEL GET-MASTER-ADDR-BY-NAME). Failover and KillMaster wait until
// all the sentinels agree before they return, but a failover that the
// sentinels start on their own, for example because the test paused the
// master for longer than the down-after time, can change the answer at
// any time.
func (g *SentinelGroup) Master(t testing.TB) *Server {
	t.Helper()
	m, err := g.reportedMaster(g.sentinelClients[0])
	if err != nil {
		t.Fatalf("redistest: sentinel %s: %v", g.sentinels[0].Addr(), err)
	}
	return m
}

// Replica returns the server of the group that is not the master, as
// Master reports it; the sentinels list it as the master's replica. Right
// after Failover it is the old master, which keeps running as a master,
// accepting writes, until the sentinels reconfigure it some ten seconds
// later or SyncReplica does so at once. After KillMaster it is the killed
// server, down until the test restarts it.
func (g *SentinelGroup) Replica(t testing.TB) *Server {
	t.Helper()
	return g.other(g.Master(t))
}

// Failover performs a planned failover: it waits until the replica is in
// sync with the master, so that every write acknowledged before the call
// is kept, asks a sentinel to fail over (SENTINEL FAILOVER), and returns
// once every sentinel reports the replica as the new master and the
// replica answers ROLE as a master. It fails the test if that has not
// happened within 20 seconds.
//
// The old master keeps running as a master, accepting writes that are
// then lost, until the sentinels reconfigure it as a replica of the new
// master some ten seconds later; SyncReplica does so at once. Failing over
// again requires the old master to be in sync first, so Failover waits
// for that (slowly) if SyncReplica was not called.
func (g *SentinelGroup) Failover(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(failoverWait)
	master := g.Master(t)
	replica := g.other(master)
	g.requireUp(t, "Failover", master, replica)
	if err := waitFor(time.Until(deadline), func() error { return g.inSync(master, replica) }); err != nil {
		t.Fatalf("redistest: Failover: replica %s not in sync with master %s within %v: %v",
			replica.Addr(), master.Addr(), failoverWait, err)
	}
	// A sentinel refuses while it does not consider the replica fit to
	// be promoted (NOGOOD), for example until it has seen in its periodic
	// INFO that a reconfigured old master is a replica again.
	err := waitFor(time.Until(deadline), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
		defer cancel()
		return g.sentinelClients[0].Failover(ctx, sentinelMasterName).Err()
	})
	if err != nil {
		t.Fatalf("redistest: SENTINEL FAILOVER %s on %s: %v", sentinelMasterName, g.sentinels[0].Addr(), err)
	}
	g.waitPromoted(t, "Failover", replica, deadline)
}

// KillMaster kills the master with SIGKILL, as Server.Kill does, and
// returns once every sentinel reports the replica as the new master and
// the replica answers ROLE as a master. It fails the test if that has not
// happened within 20 seconds; detecting the failure takes the down-after
// time (see WithDownAfter), and the whole failover normally two seconds.
//
// It first waits until the replica is replicating from the master, but
// not until it has caught up: as in a real crash, writes the replica has
// not received yet are lost. A test that needs a write to survive can wait
// for it with WAIT 1 <timeout> on the connection that made it. The killed
// server stays down until the test restarts it (empty, see
// Server.Restart), and the sentinels then make it a replica of the new
// master some ten seconds later; SyncReplica does so at once.
//
// Right after Failover, the old master is not a replica yet, so KillMaster
// waits for the sentinels to reconfigure it unless SyncReplica was called.
func (g *SentinelGroup) KillMaster(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(failoverWait)
	master := g.Master(t)
	replica := g.other(master)
	g.requireUp(t, "KillMaster", master, replica)
	if err := waitFor(time.Until(deadline), func() error { return g.attached(master, replica) }); err != nil {
		t.Fatalf("redistest: KillMaster: %s not a replica of master %s within %v: %v",
			replica.Addr(), master.Addr(), failoverWait, err)
	}
	master.Kill(t)
	g.waitPromoted(t, "KillMaster", replica, deadline)
}

// AddReplica starts one more replica of the current master that the
// sentinels can never promote (replica-priority 0), and returns once every
// sentinel lists it with its link to the master up. Master and Replica
// still name the group's two servers, which keep swapping roles; but every
// failover must now reconfigure this replica too, and the sentinel leading
// it publishes +switch-master only at the end, once the replica follows the
// new master or the failover timeout (2 s) has passed, while it and the
// other sentinels already report the new master (about a second later).
func (g *SentinelGroup) AddReplica(t testing.TB) *Server {
	t.Helper()
	master := g.Master(t)
	r := Start(t)
	r.Do(t, "CONFIG", "SET", "replica-priority", "0")
	r.Do(t, "REPLICAOF", loopbackHost, strconv.Itoa(master.port))
	err := waitFor(groupSetupTimeout, func() error {
		return g.eachSentinel(func(sc *redis.SentinelClient) error {
			ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
			defer cancel()
			replicas, err := sc.Replicas(ctx, sentinelMasterName).Result()
			if err != nil {
				return fmt.Errorf("SENTINEL REPLICAS: %w", err)
			}
			for _, rep := range replicas {
				if net.JoinHostPort(rep["ip"], rep["port"]) == r.Addr() && rep["master-link-status"] == "ok" {
					return nil
				}
			}
			return fmt.Errorf("sentinel does not list replica %s with its link up yet", r.Addr())
		})
	})
	if err != nil {
		t.Fatalf("redistest: AddReplica: %v", err)
	}
	return r
}

// PauseMaster stops the master with SIGSTOP, as Server.Pause does, and
// returns it, paused, once every sentinel reports the replica as the new
// master and the replica answers ROLE as a master: detection takes the
// down-after time (see WithDownAfter). The test resumes the old master with
// Server.Resume; it then runs as a master, with the connections its
// clients opened before the pause, until the sentinels reconfigure it some
// ten seconds later (SyncReplica does so at once). A cleanup registered on
// t resumes it if the test does not.
func (g *SentinelGroup) PauseMaster(t testing.TB) *Server {
	t.Helper()
	deadline := time.Now().Add(failoverWait)
	master := g.Master(t)
	replica := g.other(master)
	g.requireUp(t, "PauseMaster", master, replica)
	if err := waitFor(time.Until(deadline), func() error { return g.attached(master, replica) }); err != nil {
		t.Fatalf("redistest: PauseMaster: %s not a replica of master %s within %v: %v",
			replica.Addr(), master.Addr(), failoverWait, err)
	}
	master.Pause(t)
	t.Cleanup(func() { master.Resume(t) })
	g.waitPromoted(t, "PauseMaster", replica, deadline)
	return master
}

// SyncReplica makes the replica, as Replica reports it, replicate from the
// master unless it already does, and returns once it has caught up with
// the master. After Failover, or after KillMaster and a restart of the
// killed server, it does at once what the sentinels would do some ten
// seconds later: in one transaction, REPLICAOF and then CLIENT KILL TYPE
// normal and CLIENT KILL TYPE pubsub, which disconnects the clients of the
// old master (the sentinels' connections included; they reconnect at
// once) so that they reconnect and find the new master. It fails the test
// if the replica is down or does not catch up within 20 seconds.
func (g *SentinelGroup) SyncReplica(t testing.TB) {
	t.Helper()
	master := g.Master(t)
	replica := g.other(master)
	g.requireUp(t, "SyncReplica", master, replica)
	if g.attached(master, replica) != nil {
		ctx := ctxWithTimeout(t)
		_, err := g.clientOf(replica).TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ReplicaOf(ctx, loopbackHost, strconv.Itoa(master.port))
			p.ClientKillByFilter(ctx, "TYPE", "normal")
			p.ClientKillByFilter(ctx, "TYPE", "pubsub")
			return nil
		})
		if err != nil {
			t.Fatalf("redistest: SyncReplica: REPLICAOF on %s: %v", replica.Addr(), err)
		}
	}
	if err := waitFor(failoverWait, func() error { return g.inSync(master, replica) }); err != nil {
		t.Fatalf("redistest: SyncReplica: %s not in sync with master %s within %v: %v",
			replica.Addr(), master.Addr(), failoverWait, err)
	}
}

// FailoverClient returns a go-redis client that finds the master through
// the sentinels (redis.NewFailoverClient), closed by a cleanup registered
// on t. MasterName and SentinelAddrs are set from the group; the other
// options come from opts, which is not modified. A nil opts gives the
// defaults of Server.Client: one-second timeouts and no retries.
func (g *SentinelGroup) FailoverClient(t testing.TB, opts *redis.FailoverOptions) *redis.Client {
	t.Helper()
	var o redis.FailoverOptions
	if opts != nil {
		o = *opts
	} else {
		o = redis.FailoverOptions{
			DialTimeout:  clientTimeout,
			ReadTimeout:  clientTimeout,
			WriteTimeout: clientTimeout,
			MaxRetries:   -1,
		}
	}
	o.MasterName = g.MasterName()
	o.SentinelAddrs = g.SentinelAddrs()
	c := redis.NewFailoverClient(&o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// requireUp fails the test at once if one of servers is down, rather than
// letting op wait for it in vain.
func (g *SentinelGroup) requireUp(t testing.TB, op string, servers ...*Server) {
	t.Helper()
	for _, s := range servers {
		s.mu.Lock()
		down := s.p == nil
		s.mu.Unlock()
		if down {
			t.Fatalf("redistest: %s: %s is down (killed and not restarted)", op, s.Addr())
		}
	}
}

// waitPromoted waits until deadline for every sentinel to report want as
// the master and for want to answer ROLE as a master.
func (g *SentinelGroup) waitPromoted(t testing.TB, op string, want *Server, deadline time.Time) {
	t.Helper()
	err := waitFor(time.Until(deadline), func() error {
		err := g.eachSentinel(func(sc *redis.SentinelClient) error {
			m, err := g.reportedMaster(sc)
			if err == nil && m != want {
				err = fmt.Errorf("still reports master %s", m.Addr())
			}
			return err
		})
		if err != nil {
			return err
		}
		role, err := g.role(want)
		if err == nil && role != "master" {
			err = fmt.Errorf("%s answers ROLE %s", want.Addr(), role)
		}
		return err
	})
	if err != nil {
		t.Fatalf("redistest: %s: %s not promoted to master within %v: %v", op, want.Addr(), failoverWait, err)
	}
}

// sentinelReady reports why the sentinel is not yet ready to fail master
// over to replica, or nil if it is: it must report master as the master,
// must have had an INFO reply from replica saying that it is a replica
// with its link to the master up, and must know the other sentinels.
func (g *SentinelGroup) sentinelReady(sc *redis.SentinelClient, master, replica *Server, sentinels int) error {
	if m, err := g.reportedMaster(sc); err != nil {
		return err
	} else if m != master {
		return fmt.Errorf("sentinel reports master %s, want %s", m.Addr(), master.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	replicas, err := sc.Replicas(ctx, sentinelMasterName).Result()
	if err != nil {
		return fmt.Errorf("SENTINEL REPLICAS: %w", err)
	}
	found := false
	for _, r := range replicas {
		if net.JoinHostPort(r["ip"], r["port"]) != replica.Addr() {
			continue
		}
		if r["flags"] != "slave" || r["role-reported"] != "slave" || r["master-link-status"] != "ok" {
			return fmt.Errorf("sentinel not yet satisfied with replica %s: flags %q, role %q, master link %q",
				replica.Addr(), r["flags"], r["role-reported"], r["master-link-status"])
		}
		found = true
	}
	if !found {
		return fmt.Errorf("sentinel does not know replica %s yet", replica.Addr())
	}
	if sentinels > 1 {
		// CKQUORUM checks that enough sentinels are known and reachable
		// both to agree the master is down and to elect a leader.
		if others, err := sc.Sentinels(ctx, sentinelMasterName).Result(); err != nil {
			return fmt.Errorf("SENTINEL SENTINELS: %w", err)
		} else if len(others) != sentinels-1 {
			return fmt.Errorf("sentinel knows %d other sentinels, want %d", len(others), sentinels-1)
		}
		if err := sc.CkQuorum(ctx, sentinelMasterName).Err(); err != nil {
			return fmt.Errorf("SENTINEL CKQUORUM: %w", err)
		}
	}
	return nil
}

// reportedMaster returns the server that sentinel sc reports as master.
func (g *SentinelGroup) reportedMaster(sc *redis.SentinelClient) (*Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	addr, err := sc.GetMasterAddrByName(ctx, sentinelMasterName).Result()
	if err != nil {
		return nil, fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s: %w", sentinelMasterName, err)
	}
	if len(addr) != 2 {
		return nil, fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s returned %q", sentinelMasterName, addr)
	}
	hostPort := net.JoinHostPort(addr[0], addr[1])
	for _, s := range g.servers {
		if s.Addr() == hostPort {
			return s, nil
		}
	}
	return nil, fmt.Errorf("reported master %s is not a server of the group", hostPort)
}

// eachSentinel calls f for every sentinel and returns the first error.
func (g *SentinelGroup) eachSentinel(f func(sc *redis.SentinelClient) error) error {
	for i, sc := range g.sentinelClients {
		if err := f(sc); err != nil {
			return fmt.Errorf("sentinel %s: %w", g.sentinels[i].Addr(), err)
		}
	}
	return nil
}

// attached reports why replica is not replicating from master with its
// link up, or nil if it is.
func (g *SentinelGroup) attached(master, replica *Server) error {
	_, err := g.replicaOffset(master, replica)
	return err
}

// inSync reports why replica has not caught up with master, or nil if it
// has: it must replicate from master with its link up and have processed
// the replication stream up to the master's current offset.
func (g *SentinelGroup) inSync(master, replica *Server) error {
	have, err := g.replicaOffset(master, replica)
	if err != nil {
		return err
	}
	info, err := g.replicationInfo(master)
	if err != nil {
		return err
	}
	if info["role"] != "master" {
		return fmt.Errorf("%s is not a master (role %q)", master.Addr(), info["role"])
	}
	want, err := strconv.ParseInt(info["master_repl_offset"], 10, 64)
	if err != nil {
		return fmt.Errorf("master_repl_offset of %s: %w", master.Addr(), err)
	}
	if have < want {
		return fmt.Errorf("replica %s at offset %d, master %s at %d", replica.Addr(), have, master.Addr(), want)
	}
	return nil
}

// replicaOffset returns the replication offset replica has processed, or
// an error if it is not replicating from master with its link up.
func (g *SentinelGroup) replicaOffset(master, replica *Server) (int64, error) {
	info, err := g.replicationInfo(replica)
	if err != nil {
		return 0, err
	}
	if info["role"] != "slave" {
		return 0, fmt.Errorf("%s is not a replica (role %q)", replica.Addr(), info["role"])
	}
	if got := net.JoinHostPort(info["master_host"], info["master_port"]); got != master.Addr() {
		return 0, fmt.Errorf("%s replicates from %s, not %s", replica.Addr(), got, master.Addr())
	}
	if info["master_link_status"] != "up" {
		return 0, fmt.Errorf("%s has master_link_status %q", replica.Addr(), info["master_link_status"])
	}
	off, err := strconv.ParseInt(info["slave_repl_offset"], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("slave_repl_offset of %s: %w", replica.Addr(), err)
	}
	return off, nil
}

// replicationInfo returns the fields of INFO replication on s.
func (g *SentinelGroup) replicationInfo(s *Server) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	text, err := g.clientOf(s).Info(ctx, "replication").Result()
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

// role returns the first element of s's ROLE reply: "master", "slave" or
// "sentinel".
func (g *SentinelGroup) role(s *Server) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	reply, err := g.clientOf(s).Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", fmt.Errorf("ROLE on %s: %w", s.Addr(), err)
	}
	if len(reply) == 0 {
		return "", fmt.Errorf("ROLE on %s: empty reply", s.Addr())
	}
	role, ok := reply[0].(string)
	if !ok {
		return "", fmt.Errorf("ROLE on %s: unexpected reply %#v", s.Addr(), reply)
	}
	return role, nil
}

// other returns the server of the group that is not s.
func (g *SentinelGroup) other(s *Server) *Server {
	if s == g.servers[0] {
		return g.servers[1]
	}
	return g.servers[0]
}

// clientOf returns the administrative client of server s of the group.
func (g *SentinelGroup) clientOf(s *Server) *redis.Client {
	if s == g.servers[0] {
		return g.clients[0]
	}
	return g.clients[1]
}

// closeClients closes the administrative clients.
func (g *SentinelGroup) closeClients() {
	for _, c := range g.clients {
		_ = c.Close()
	}
	for _, c := range g.sentinelClients {
		_ = c.Close()
	}
}

// adminOptions returns the options of an administrative connection to
// addr: one connection, short timeouts and no retries, so that a server
// that is down makes a check fail at once rather than hang.
func adminOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:         addr,
		DialTimeout:  clientTimeout,
		ReadTimeout:  clientTimeout,
		WriteTimeout: clientTimeout,
		MaxRetries:   -1,
		PoolSize:     1,
	}
}

// adminClient returns a new client with adminOptions.
func adminClient(addr string) *redis.Client {
	return redis.NewClient(adminOptions(addr))
}

// ctxWithTimeout returns a context that ends after clientTimeout or with
// the test.
func ctxWithTimeout(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	t.Cleanup(cancel)
	return ctx
}

// waitFor calls check every groupPollInterval until it returns nil, and
// returns nil then. If timeout expires first, it returns check's last
// error.
func waitFor(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(groupPollInterval)
	defer ticker.Stop()
	err := errors.New("not checked: no time left")
	for time.Now().Before(deadline) {
		if err = check(); err == nil {
			return nil
		}
		<-ticker.C
	}
	return err
}
