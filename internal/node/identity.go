package node

import (
	"context"
	"fmt"
	"strings"

	"github.com/redlockgo/redlock/internal/scripts"
)

// WarmUp dials the node and loads the scripts, so that a first call is not
// judged by a budget that a dial and a NOSCRIPT round trip already spent.
// With identify it also reads the server's run_id, and reports whether it
// learnt it. It reads the maxmemory-policy for the constructor's warning.
// Errors are ignored: a node that is down now is dialled again by
// the first call that needs it.
func (n *Node) WarmUp(ctx context.Context, identify bool) (identified bool) {
	if identify {
		if id, err := FetchRunID(ctx, n.Client); err == nil {
			n.SetIdentity(id)
			identified = true
		}
	}
	for _, s := range scripts.All {
		err := s.Load(ctx, n.Client).Err()
		n.Note(err) // a refused dial is what the first call's timeout will name
		if err != nil {
			break
		}
	}
	n.Evict.Probe(ctx, n.Client)
	return identified
}

// FetchRunID reads who the server is through a one-call pipeline (the
// Client interface asks for no more than that): INFO server's run_id, and
// INFO replication's role and master_replid.
func FetchRunID(ctx context.Context, cl Client) (ServerID, error) {
	pipe := cl.Pipeline()
	srv := pipe.Info(ctx, "server")
	repl := pipe.Info(ctx, "replication")
	if _, err := pipe.Exec(ctx); err != nil {
		if IsServerError(err) {
			// The server will not say who it is (an ACL user without
			// +info, a server that does not implement INFO server): it
			// cannot be told apart from the others, so it is taken as
			// distinct rather than never allowed to vote.
			return ServerID{runID: Unidentified}, nil
		}
		return ServerID{}, err
	}
	var id ServerID
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
		return ServerID{}, fmt.Errorf("%w: INFO server without run_id", ErrBadReply)
	}
	return id, nil
}

// ServerID is what FetchRunID learns.
type ServerID struct {
	runID, replID string
	replica       bool
}

// Unidentified stands for the run_id of a server that refuses INFO.
const Unidentified = "?"

func (n *Node) SetIdentity(id ServerID) {
	n.IDMu.Lock()
	n.RunID, n.ReplID, n.Replica = id.runID, id.replID, id.replica
	n.IDMu.Unlock()
}

// SameDataset reports whether n and o are one server, or a master and its
// replica (one replication ID), and which of them must not vote: the
// replica, else the later in the client list. why says which, for the error.
func SameDataset(n, o *Node) (same bool, second *Node, why string) {
	n.IDMu.Lock()
	nid, nrepl, nreplica := n.RunID, n.ReplID, n.Replica
	n.IDMu.Unlock()
	o.IDMu.Lock()
	oid, orepl, oreplica := o.RunID, o.ReplID, o.Replica
	o.IDMu.Unlock()
	if nid == "" || nid == Unidentified || oid == "" || oid == Unidentified {
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
	case n.Idx > o.Idx:
		return true, n, why
	}
	return true, o, why
}

func (n *Node) Identity() (runID string, dup int) {
	n.IDMu.Lock()
	defer n.IDMu.Unlock()
	return n.RunID, int(n.Dup.Load())
}
