package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redlockgo/redlock/internal/scripts"
)

// idents tells apart the servers behind the nodes: a Redlock node's vote
// counts only once its server's run_id is known, and never when another
// node of the pool reaches the same server.
type idents struct {
	mu    sync.Mutex // serialises the duplicate checks
	nodes []*node    // the pool's
}

// warmUp dials the node and loads the scripts, so that a first call is not
// judged by a budget that a dial and a NOSCRIPT round trip already spent.
// With identify it also reads the server's run_id, and reports whether it
// learnt it. It reads the maxmemory-policy for the constructor's warning.
// Errors are ignored: a node that is down now is dialled again by
// the first call that needs it.
func (n *node) warmUp(ctx context.Context, identify bool) (identified bool) {
	if identify {
		if id, err := fetchRunID(ctx, n.client); err == nil {
			n.setIdentity(id)
			identified = true
		}
	}
	for _, s := range scripts.All {
		err := s.Load(ctx, n.client).Err()
		n.note(err) // a refused dial is what the first call's timeout will name
		if err != nil {
			break
		}
	}
	n.evict.probe(ctx, n.client)
	return identified
}

// fetchRunID reads who the server is through a one-call pipeline (the
// Client interface asks for no more than that): INFO server's run_id, and
// INFO replication's role and master_replid.
func fetchRunID(ctx context.Context, cl Client) (serverID, error) {
	pipe := cl.Pipeline()
	srv := pipe.Info(ctx, "server")
	repl := pipe.Info(ctx, "replication")
	if _, err := pipe.Exec(ctx); err != nil {
		if isServerError(err) {
			// The server will not say who it is (an ACL user without
			// +info, a server that does not implement INFO server): it
			// cannot be told apart from the others, so it is taken as
			// distinct rather than never allowed to vote.
			return serverID{runID: unidentified}, nil
		}
		return serverID{}, err
	}
	var id serverID
	for line := range strings.Lines(srv.Val() + repl.Val()) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			id.runID = v
		} else if v, ok := strings.CutPrefix(line, "master_replid:"); ok {
			id.replID = v
		} else if v, ok := strings.CutPrefix(line, "role:"); ok {
			id.replica = v != "master"
		}
	}
	if id.runID == "" {
		return serverID{}, fmt.Errorf("%w: INFO server without run_id", errBadReply)
	}
	return id, nil
}

// serverID is what fetchRunID learns.
type serverID struct {
	runID, replID string
	replica       bool
}

// unidentified stands for the run_id of a server that refuses INFO.
const unidentified = "?"

func (n *node) setIdentity(id serverID) {
	n.idMu.Lock()
	n.runID, n.replID, n.replica = id.runID, id.replID, id.replica
	n.idMu.Unlock()
}

// sameDataset reports whether n and o are one server, or a master and its
// replica (one replication ID), and which of them must not vote: the
// replica, else the later in the client list. why says which, for the error.
func sameDataset(n, o *node) (same bool, second *node, why string) {
	n.idMu.Lock()
	nid, nrepl, nreplica := n.runID, n.replID, n.replica
	n.idMu.Unlock()
	o.idMu.Lock()
	oid, orepl, oreplica := o.runID, o.replID, o.replica
	o.idMu.Unlock()
	if nid == "" || nid == unidentified || oid == "" || oid == unidentified {
		return false, nil, ""
	}
	if nid != oid && (nrepl == "" || nrepl != orepl) {
		return false, nil, ""
	}
	why = "reach one server (run_id " + nid + ")"
	if nid != oid {
		why = "share one dataset: one is a replica of the other (replication ID " + nrepl + ")"
	}
	switch {
	case nreplica && !oreplica:
		return true, n, why
	case oreplica && !nreplica:
		return true, o, why
	case n.idx > o.idx:
		return true, n, why
	}
	return true, o, why
}

func (n *node) identity() (runID string, dup int) {
	n.idMu.Lock()
	defer n.idMu.Unlock()
	return n.runID, int(n.dup.Load())
}

// identify makes sure a Redlock node's server is known before its vote
// counts, reading its run_id on first contact when the warm-up could not.
func (ids *idents) identify(ctx context.Context, n *node) error {
	if len(ids.nodes) < 2 || !identifiable(n.client) {
		return nil
	}
	id, dup := n.identity()
	if dup >= 0 {
		return fmt.Errorf("%w (node %d)", errDuplicate, dup)
	}
	if id != "" {
		return nil
	}
	sid, err := fetchRunID(ctx, n.client)
	if err != nil {
		return err
	}
	n.setIdentity(sid)
	ids.mu.Lock()
	err = ids.checkDuplicate(n)
	ids.mu.Unlock()
	if n.isDup() {
		return err
	}
	return nil
}

// checkDuplicate compares n's identity with every other node's; of two
// nodes with one run_id, or a master and its replica (one replication ID),
// the replica, else the later in the client list, is marked a duplicate of
// the other: its votes never count. Call it under ids.mu, so two nodes identified at once see each
// other.
func (ids *idents) checkDuplicate(n *node) error {
	for _, o := range ids.nodes {
		if o == n {
			continue
		}
		same, second, why := sameDataset(n, o)
		if !same {
			continue
		}
		first := n
		if second == n {
			first = o
		}
		second.dup.Store(int32(first.idx))
		return fmt.Errorf("%w: clients %d (%s) and %d (%s) %s", errDuplicate, first.idx, first.addr, second.idx, second.addr, why)
	}
	return nil
}

// duplicates marks and reports nodes whose run_id another node has already.
func (ids *idents) duplicates() error {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	var errs []error
	for _, n := range ids.nodes {
		if n.isDup() {
			continue
		}
		if err := ids.checkDuplicate(n); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return join(append([]error{errors.New("redlock: Redlock needs independent masters")}, errs...)...)
	}
	return nil
}

// warmUp dials every node, loads the scripts and, for a Redlock, learns each
// server's run_id, waiting at most warmUpLimit or the node timeout, whichever
// is longer. Two nodes that turn out to be one server (127.0.0.1:P and
// localhost:P, a DNS alias) make it fail: a quorum that one process can
// satisfy is no quorum.
func (ids *idents) warmUp(life *lifecycle, timeout time.Duration) error {
	identify := len(ids.nodes) > 1
	limit := max(warmUpLimit, timeout)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	done := make(chan struct{}, len(ids.nodes))
	life.wg.Add(len(ids.nodes))
	for _, n := range ids.nodes {
		go func() {
			defer life.wg.Done()
			defer func() { done <- struct{}{} }()
			if n.warmUp(ctx, identify && identifiable(n.client)) {
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
