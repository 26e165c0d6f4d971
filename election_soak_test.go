package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/history"
	"github.com/redlockgo/redlock/internal/redistest"
)

// TestElectionSoakOneMasterFaulted: three candidates, each its own Redlock
// over the same three masters, take turns leading (each leader makes fenced
// writes, then resigns), and two observers watch, while one master at a time
// is paused, black-holed and restarted empty. The history is checked by
// internal/history (one leader at a time, terms increasing, no stale write
// admitted, Done before the next leader) and by porcupine, whose model is
// the election: a term is elected only above every earlier one, a fenced
// write is admitted exactly when its term is the highest admitted so far,
// and an observer reports only a term that was the current one at some
// point since it began observing (or 0: none, or cannot tell); on each
// observer's channel terms never go backwards except through 0.
func TestElectionSoakOneMasterFaulted(t *testing.T) {
	if testing.Short() {
		t.Skip("an election under faults for several seconds; skipped with -short")
	}
	t.Parallel()
	const (
		name     = "soak"
		ttl      = time.Second
		faultFor = 1200 * time.Millisecond
		healFor  = 800 * time.Millisecond
	)
	servers := redistest.StartN(t, 3)
	proxies := make([]*redistest.Proxy, len(servers))
	for i, srv := range servers {
		proxies[i] = redistest.NewProxy(t, srv.Addr())
	}
	// Every client goes through the proxies, so that a black hole cuts
	// candidates and observers alike.
	election := func() *Election {
		clients := make([]Client, len(proxies))
		for i, p := range proxies {
			clients[i] = goRedisDefaults(t, p.Addr())
		}
		r, err := NewRedlock(clients, WithTTL(ttl))
		require.NoError(t, err)
		t.Cleanup(func() { r.Close() })
		return r.Election(name)
	}

	origin := time.Now()
	ts := func(at time.Time) int64 { return int64(at.Sub(origin)) }
	var (
		mu  sync.Mutex
		ops []porcupine.Operation
	)
	record := func(client int, in, out any, call, ret time.Time) {
		mu.Lock()
		defer mu.Unlock()
		ops = append(ops, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: ts(call), Return: ts(ret)})
	}
	rec := history.New()
	var fence Fence

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	const candidates, observers = 3, 2
	reports := make([][]Leader, observers)
	for o := range observers {
		e := election()
		began := time.Now()
		ch := e.Observe(ctx)
		wg.Go(func() {
			for l := range ch {
				if l.Term != 0 { // 0 (none, or cannot tell) is always true
					record(candidates+o, soakOp{kind: "report", term: l.Term, observer: o}, nil, began, time.Now())
				}
				reports[o] = append(reports[o], l)
			}
		})
	}
	for c := range candidates {
		e := election()
		wg.Go(func() {
			for ctx.Err() == nil {
				call := time.Now()
				l, err := e.Campaign(ctx, fmt.Sprintf("candidate-%d", c))
				if err != nil {
					continue // ctx ended, or a round without a quorum: campaign again
				}
				won := time.Now()
				record(c, soakOp{kind: "elect", term: l.Token()}, nil, call, won)
				a := rec.Acquired(name, l.Owner(), l.Token(), won, l.Until())
				for range 3 {
					wcall := time.Now()
					admitted := rec.Fenced(name, l.Token(), func() error { return fence.Admit(l.Token()) }) == nil
					record(c, soakOp{kind: "write", term: l.Token()}, admitted, wcall, time.Now())
				}
				select {
				case <-time.After(50 * time.Millisecond): // the leader's work
				case <-l.Done():
				}
				rec.Renewed(a, l.Until())
				resign := time.Now()
				rec.Released(a, resign)
				err = l.Unlock(context.Background())
				if errors.Is(l.Err(), ErrLost) {
					rec.Lost(a, doneAt(l))
				}
				rec.DoneClosed(a, doneAt(l))
				if err == nil {
					record(c, soakOp{kind: "resign", term: l.Token()}, nil, resign, time.Now())
				}
			}
		})
	}

	time.Sleep(healFor) // elections under no fault first: the test's schedule, not a synchronisation
	for i, fault := range []string{"pause", "black hole", "restart empty"} {
		switch fault {
		case "pause":
			servers[i].Pause(t)
		case "black hole":
			proxies[i].Blackhole(true)
		case "restart empty":
			servers[i].Kill(t)
		}
		time.Sleep(faultFor) // the fault's length, not a synchronisation
		switch fault {
		case "pause":
			servers[i].Resume(t)
		case "black hole":
			proxies[i].Blackhole(false)
		case "restart empty":
			servers[i].Restart(t)
		}
		time.Sleep(healFor) // the heal's length
	}
	stop()
	wg.Wait()

	require.NoError(t, rec.Err(), "history:\n%s", rec.Dump())
	elected := map[int64]bool{}
	for _, op := range ops {
		if in := op.Input.(soakOp); in.kind == "elect" {
			elected[in.term] = true
		}
	}
	require.GreaterOrEqual(t, len(elected), 10, "leaders elected over the soak")
	// A term no Campaign returned: an attempt that a quorum granted and
	// that then gave the lock up (its validity spent, a master's answer
	// late) was the server's leader for that while, and an observer may
	// have read it (Election.Observe says so). Such a term was minted
	// after the last election before it.
	phantoms := 0
	for i, op := range ops {
		if in := op.Input.(soakOp); in.kind == "report" && !elected[in.term] {
			in.kind = "phantom"
			ops[i].Input = in
			phantoms++
		}
	}
	checking := time.Now()
	res, info := porcupine.CheckOperationsVerbose(soakModel, ops, 30*time.Second)
	require.Equal(t, porcupine.Ok, res, "the election's history is not linearizable (%d operations): %v", len(ops), info.PartialLinearizationsOperations())
	t.Logf("porcupine: %d operations linearizable, checked in %v", len(ops), time.Since(checking))
	for o, ls := range reports {
		require.NotEmpty(t, ls, "observer %d reported nothing", o)
		assertTermsNeverBack(t, ls)
	}
	t.Logf("%d leaders, %d fenced writes, %d observer reports (%d and %d), %d of a term no Campaign returned",
		len(elected), len(rec.Writes()), len(reports[0])+len(reports[1]), len(reports[0]), len(reports[1]), phantoms)
}

// soakOp is one operation of the election soak's history.
type soakOp struct {
	kind     string // elect, resign, write (output: admitted), report, phantom (a report of a term no Campaign returned)
	term     int64
	observer int // of a report
}

// soakState is the election as porcupine's model sees it: the current
// term (0: none), the highest ever elected, and the highest a fence
// admitted.
type soakState struct{ cur, elected, admitted int64 }

var soakModel = porcupine.Model{
	// The fence's writes depend on nothing else; each observer's reports
	// only on the elections. So the fenced writes are checked apart, and
	// each observer's reports with the elections and resignations (which
	// every such part repeats): fewer operations at once to order.
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		var writes, elections []porcupine.Operation
		byObserver := map[int][]porcupine.Operation{}
		for _, op := range ops {
			switch in := op.Input.(soakOp); in.kind {
			case "write":
				writes = append(writes, op)
			case "report", "phantom":
				byObserver[in.observer] = append(byObserver[in.observer], op)
			default:
				elections = append(elections, op)
			}
		}
		parts := [][]porcupine.Operation{writes, elections}
		for _, reports := range byObserver {
			parts = append(parts, append(slices.Clone(elections), reports...))
		}
		return parts
	},
	Init: func() any { return soakState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in := state.(soakState), input.(soakOp)
		switch in.kind {
		case "elect":
			// A leader that was lost (its lease ran out) resigns nothing:
			// the next election replaces it.
			if in.term <= s.elected {
				return false, s
			}
			s.cur, s.elected = in.term, in.term
		case "resign":
			if s.cur != in.term {
				return false, s
			}
			s.cur = 0
		case "write":
			admitted := in.term >= s.admitted
			if output.(bool) != admitted {
				return false, s
			}
			if admitted {
				s.admitted = in.term
			}
		case "report":
			return in.term == 0 || in.term == s.cur, s
		case "phantom":
			return in.term > s.elected, s
		}
		return true, s
	},
	DescribeOperation: func(input, output any) string {
		in := input.(soakOp)
		if in.kind == "write" {
			return fmt.Sprintf("write(%d) -> %v", in.term, output)
		}
		return fmt.Sprintf("%s(%d)", in.kind, in.term)
	},
}

// TestSoakModel: the soak's model rejects the histories it is there to
// catch: terms elected out of order, a stale write admitted, a report of a
// term before its election, a resignation of a term that is not current.
func TestSoakModel(t *testing.T) {
	t.Parallel()
	op := func(kind string, term int64, out any, call, ret int64) porcupine.Operation {
		return porcupine.Operation{Input: soakOp{kind: kind, term: term}, Output: out, Call: call, Return: ret}
	}
	for _, c := range []struct {
		name string
		ok   bool
		ops  []porcupine.Operation
	}{
		{"in order", true, []porcupine.Operation{op("elect", 5, nil, 0, 1), op("write", 5, true, 2, 3), op("report", 5, nil, 0, 4), op("resign", 5, nil, 5, 6), op("elect", 7, nil, 5, 8), op("write", 7, true, 9, 10), op("write", 5, false, 11, 12), op("report", 0, nil, 0, 13)}},
		{"terms out of order", false, []porcupine.Operation{op("elect", 7, nil, 0, 1), op("elect", 5, nil, 2, 3)}},
		{"stale write admitted", false, []porcupine.Operation{op("elect", 5, nil, 0, 1), op("write", 5, true, 2, 3), op("elect", 7, nil, 4, 5), op("write", 7, true, 6, 7), op("write", 5, true, 8, 9)}},
		{"report before the election", false, []porcupine.Operation{op("report", 5, nil, 0, 1), op("elect", 5, nil, 2, 3)}},
		{"report after the next election", false, []porcupine.Operation{op("elect", 5, nil, 0, 1), op("elect", 7, nil, 2, 3), op("report", 5, nil, 4, 5)}},
		{"resign of another term", false, []porcupine.Operation{op("elect", 5, nil, 0, 1), op("resign", 4, nil, 2, 3)}},
		{"phantom between elections", true, []porcupine.Operation{op("elect", 5, nil, 0, 1), op("phantom", 6, nil, 0, 4), op("elect", 7, nil, 2, 3)}},
		{"phantom after a later election", false, []porcupine.Operation{op("elect", 5, nil, 0, 1), op("elect", 7, nil, 2, 3), op("phantom", 6, nil, 4, 5)}},
	} {
		assert.Equal(t, c.ok, porcupine.CheckOperations(soakModel, c.ops), c.name)
	}
}
