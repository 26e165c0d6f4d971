package redistest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keyOn returns a key whose slot master i of c serves.
func keyOn(t *testing.T, c *Cluster, i int) string {
	t.Helper()
	for n := range 1000 {
		k := fmt.Sprintf("k%d", n)
		slot := int(c.Masters[0].Do(t, "CLUSTER", "KEYSLOT", k).(int64))
		if c.Owner(t, slot) == i {
			return k
		}
	}
	t.Fatalf("no key on master %d in 1000 tries", i)
	return ""
}

// TestClusterFailover: CLUSTER FAILOVER moves master 0's slots to its
// replica with every write, the old master following it; the cluster
// client keeps working across it.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3, WithClusterReplicas())
	cl := c.Client(t)
	ctx := ctxT(t)
	k := keyOn(t, c, 0)
	require.NoError(t, cl.Set(ctx, k, "1", 0).Err())
	old, replica := c.Masters[0], c.Replicas[0]

	start := time.Now()
	c.Failover(t, 0)
	t.Logf("CLUSTER FAILOVER agreed on by every node after %v", time.Since(start))
	assert.Same(t, replica, c.Masters[0], "Masters[0] after the failover")
	assert.Same(t, old, c.Replicas[0], "Replicas[0] after the failover")
	assert.Equal(t, 0, c.Owner(t, int(c.Masters[0].Do(t, "CLUSTER", "KEYSLOT", k).(int64))), "owner of the key's slot")
	assert.Equal(t, "1", replica.Do(t, "GET", k), "the write on the promoted replica")
	require.Eventually(t, func() bool { return cl.Set(ctx, k, "2", 0).Err() == nil }, 5*time.Second, 10*time.Millisecond,
		"SET through the cluster client after the failover")
	assert.Equal(t, "2", replica.Do(t, "GET", k))
}

// TestClusterKillMaster: with replication cut, a write to master 0 is
// gone once the cluster has promoted the replica after the master's kill,
// while a write replicated before is kept; so with PauseMaster, after which
// the old master rejoins as a replica of the new one.
func TestClusterKillMaster(t *testing.T) {
	t.Parallel()
	for _, pause := range []bool{false, true} {
		t.Run(fmt.Sprintf("pause=%v", pause), func(t *testing.T) {
			t.Parallel()
			c := StartCluster(t, 3, WithClusterReplicas(), WithClusterNodeTimeout(time.Second))
			k := keyOn(t, c, 1)
			c.Masters[1].Do(t, "SET", k, "kept")
			c.WaitSynced(t, 1)
			c.CutReplication(t, 1)
			c.Masters[1].Do(t, "SET", k+"{"+k+"}", "lost")
			replica := c.Replicas[1]
			start := time.Now()
			if pause {
				c.PauseMaster(t, 1)
			} else {
				c.KillMaster(t, 1)
			}
			t.Logf("replica promoted and agreed on %v after the fault (node timeout 1s)", time.Since(start))
			assert.Same(t, replica, c.Masters[1])
			assert.Equal(t, "kept", replica.Do(t, "GET", k))
			assert.Nil(t, replica.Do(t, "GET", k+"{"+k+"}"), "a write made after the cut")
			if pause {
				c.Resume(t, 1)
				assert.Equal(t, "slave", c.Replicas[1].Do(t, "ROLE").([]any)[0], "the old master's ROLE after Resume")
			}
		})
	}
}
