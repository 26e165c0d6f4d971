package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redlockgo/redlock/internal/lifecycle"
	"github.com/redlockgo/redlock/internal/node"
)

// idents tells apart the servers behind the nodes: a Redlock node's vote
// counts only once its server's run_id is known, and never when another
// node of the pool reaches the same server.
type idents struct {
	mu    sync.Mutex   // serialises the duplicate checks
	nodes []*node.Node // the pool's
}

// Identify makes sure a Redlock node's server is known before its vote
// counts, reading its run_id on first contact when the warm-up could not.
func (ids *idents) Identify(ctx context.Context, n *node.Node) error {
	if len(ids.nodes) < 2 || !node.Identifiable(n.Client) {
		return nil
	}
	id, dup := n.Identity()
	if dup >= 0 {
		return fmt.Errorf("%w (node %d)", node.ErrDuplicate, dup)
	}
	if id != "" {
		return nil
	}
	sid, err := node.FetchRunID(ctx, n.Client)
	if err != nil {
		return err
	}
	n.SetIdentity(sid)
	ids.mu.Lock()
	err = ids.checkDuplicate(n)
	ids.mu.Unlock()
	if n.IsDup() {
		return err
	}
	return nil
}

// checkDuplicate compares n's identity with every other node's; of two
// nodes with one run_id, or a master and its replica (one replication ID),
// the replica, else the later in the client list, is marked a duplicate of
// the other: its votes never count. Call it under ids.mu, so two nodes identified at once see each
// other.
func (ids *idents) checkDuplicate(n *node.Node) error {
	for _, o := range ids.nodes {
		if o == n {
			continue
		}
		same, second, why := node.SameDataset(n, o)
		if !same {
			continue
		}
		first := n
		if second == n {
			first = o
		}
		second.Dup.Store(int32(first.Idx))
		return fmt.Errorf("%w: clients %d (%s) and %d (%s) %s", node.ErrDuplicate, first.Idx, first.Addr, second.Idx, second.Addr, why)
	}
	return nil
}

// duplicates marks and reports nodes whose run_id another node has already.
func (ids *idents) duplicates() error {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	var errs []error
	for _, n := range ids.nodes {
		if n.IsDup() {
			continue
		}
		if err := ids.checkDuplicate(n); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return Say.Join(append([]error{errors.New("redlock: Redlock needs independent masters")}, errs...)...)
	}
	return nil
}

// warmUp dials every node, loads the scripts and, for a Redlock, learns each
// server's run_id, waiting at most warmUpLimit or the node timeout, whichever
// is longer. Two nodes that turn out to be one server (127.0.0.1:P and
// localhost:P, a DNS alias) make it fail: a quorum that one process can
// satisfy is no quorum.
func (ids *idents) warmUp(life *lifecycle.Life, timeout time.Duration) error {
	identify := len(ids.nodes) > 1
	limit := max(warmUpLimit, timeout)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	done := make(chan struct{}, len(ids.nodes))
	life.WG.Add(len(ids.nodes))
	for _, n := range ids.nodes {
		go func() {
			defer life.WG.Done()
			defer func() { done <- struct{}{} }()
			if n.WarmUp(ctx, identify && node.Identifiable(n.Client)) {
				// Also when this answer comes after the constructor stopped
				// waiting: the node's votes stop counting from then on.
				ids.mu.Lock()
				_ = ids.checkDuplicate(n)
				ids.mu.Unlock()
			}
		}()
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	defer cancel()
	for range ids.nodes {
		select {
		case <-done:
		case <-t.C:
			return ids.duplicates()
		}
	}
	return ids.duplicates()
}
