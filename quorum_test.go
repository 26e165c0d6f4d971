package redlock

import (
	"fmt"
	"testing"
)

// TestQuorumEveryOutcome: for 1 to 7 nodes and every way each node can
// answer (yes, no, error, no reply yet), the tally counts them, a round is
// settled exactly when a majority said yes or a majority can no longer say
// yes, and shortOf names the count it reached. Pure: no server.
func TestQuorumEveryOutcome(t *testing.T) {
	const (
		yes = iota
		no
		failed
		silent
	)
	for n := 1; n <= 7; n++ {
		c := &pool{quorum: n/2 + 1}
		for i := range n {
			c.nodes = append(c.nodes, newNode(i, nil))
		}
		outcomes := 1
		for range n {
			outcomes *= 4
		}
		for code := range outcomes {
			var rs []reply
			var ok, refused, errs int
			for i, x := 0, code; i < n; i, x = i+1, x/4 {
				switch x % 4 {
				case yes:
					rs = append(rs, reply{node: i, ok: true})
					ok++
				case no:
					rs = append(rs, reply{node: i})
					refused++
				case failed:
					rs = append(rs, reply{node: i, err: errNodeTimeout})
					errs++
				}
			}
			name := fmt.Sprintf("n=%d/yes=%d,no=%d,err=%d", n, ok, refused, errs)
			tl := c.count(rs)
			if tl.ok != ok || tl.no != refused || tl.failed != errs || len(tl.errs) != errs {
				t.Fatalf("%s: count() = %+v", name, tl)
			}
			majority := n/2 + 1
			wantSettled := ok >= majority || refused+errs > n-majority
			if got := c.settled(rs); got != wantSettled {
				t.Fatalf("%s: settled() = %v, want %v", name, got, wantSettled)
			}
			if got, want := c.impossible(refused+errs), refused+errs > n-majority; got != want {
				t.Fatalf("%s: impossible(%d) = %v, want %v", name, refused+errs, got, want)
			}
			if ok < majority {
				want := fmt.Sprintf("redlock: op reached %d of %d nodes, need %d", ok, n, majority)
				if got := c.shortOf("op", tl, "", nil).Error(); len(got) < len(want) || got[:len(want)] != want {
					t.Fatalf("%s: shortOf() = %q, want it to start with %q", name, got, want)
				}
			}
		}
	}
}
