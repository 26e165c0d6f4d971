// Package history records what lock holders did during a test (every
// acquisition and every fenced write attempt) and checks the record against
// the safety properties of a lock service:
//
//   - no two holders of one name whose validity windows overlap;
//   - fencing tokens strictly increasing in acquisition order, per name;
//   - every write a fence admitted carries the highest token the fence had
//     seen so far;
//   - every holder's Done closed no later than the moment another owner
//     acquired the name.
//
// Some faults (a Redis restarted empty, a failover to a replica that missed
// the write) are known to break the first property for any Redis lock; a
// test of such a fault asserts that the checker reports exactly the expected
// kinds of violation, and that the fence rejected the stale holder's writes.
//
// Times are those of the test process's clock (with their monotonic
// readings), so histories are meant to be recorded in one process.
package history

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Kind names a property a history can violate.
type Kind string

// The properties Check verifies.
const (
	// Overlap: two holders of one name whose validity windows overlap.
	Overlap Kind = "overlap"
	// TokenOrder: a token not greater than the token of an earlier
	// acquisition of the same name.
	TokenOrder Kind = "token-order"
	// StaleWrite: a fence admitted a write whose token was below the
	// highest it had seen before.
	StaleWrite Kind = "stale-write"
	// LateDone: a holder's Done was still open when another owner acquired
	// the name.
	LateDone Kind = "late-done"
)

// Acquisition is one successful acquisition of a lock, as recorded. Its
// fields are read under the Recorder's mutex; use Recorder.Acquisitions for
// a consistent copy.
type Acquisition struct {
	Seq        int // order of recording, from 1
	Name       string
	Owner      string
	Token      int64
	AcquiredAt time.Time // when the acquire call returned
	Until      time.Time // the end of the validity the library promised
	ReleasedAt time.Time // when the holder called Unlock (zero if it did not)
	LostAt     time.Time // when the holder learnt of a loss (zero if it did not)
	DoneAt     time.Time // when Done closed (zero while open or unobserved)
}

// End is the end of the validity window: the earliest of Until, the
// release call, the loss and the closing of Done. From then on the holder
// no longer relies on the lock.
func (a Acquisition) End() time.Time {
	end := a.Until
	for _, t := range []time.Time{a.ReleasedAt, a.LostAt, a.DoneAt} {
		if !t.IsZero() && t.Before(end) {
			end = t
		}
	}
	return end
}

func (a Acquisition) String() string {
	return fmt.Sprintf("#%d %q owner %.8s token %d", a.Seq, a.Name, a.Owner, a.Token)
}

// Write is one fenced write attempt.
type Write struct {
	Seq      int // order of recording, from 1
	Name     string
	Token    int64
	At       time.Time
	Admitted bool
}

// Violation is one breach of a property.
type Violation struct {
	Kind   Kind
	Name   string
	Detail string
}

func (v Violation) String() string { return fmt.Sprintf("%s on %q: %s", v.Kind, v.Name, v.Detail) }

// Recorder collects a history. The zero value is not ready; use New. A
// Recorder is safe for concurrent use.
type Recorder struct {
	origin time.Time

	mu     sync.Mutex
	acqs   []*Acquisition
	writes []Write

	// fenceMu serialises Fenced calls, so that the order writes are
	// recorded in is the order the fence decided them in.
	fenceMu sync.Mutex
}

// New returns an empty Recorder.
func New() *Recorder { return &Recorder{origin: time.Now()} }

// Acquired records an acquisition and returns its handle for the later
// Released, Lost and DoneClosed calls.
func (r *Recorder) Acquired(name, owner string, token int64, acquiredAt, until time.Time) *Acquisition {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := &Acquisition{Seq: len(r.acqs) + 1, Name: name, Owner: owner, Token: token, AcquiredAt: acquiredAt, Until: until}
	r.acqs = append(r.acqs, a)
	return a
}

// Released records that the holder called Unlock at at: it stopped relying
// on the lock then, whatever the call returned. Only the first call counts.
func (r *Recorder) Released(a *Acquisition, at time.Time) { r.set(a, &a.ReleasedAt, at) }

// Lost records that the holder learnt at at that the lock was lost.
func (r *Recorder) Lost(a *Acquisition, at time.Time) { r.set(a, &a.LostAt, at) }

// Renewed records the lock's Until after a renewal or an Extend moved it.
func (r *Recorder) Renewed(a *Acquisition, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a.Until = until
}

// DoneClosed records when the lock's Done channel closed.
func (r *Recorder) DoneClosed(a *Acquisition, at time.Time) { r.set(a, &a.DoneAt, at) }

func (r *Recorder) set(a *Acquisition, field *time.Time, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if field.IsZero() {
		*field = at
	}
}

// Write records a fenced write attempt on name with token, and whether the
// fence admitted it. Concurrent writers must record in the order the fence
// decided; Fenced does that for them.
func (r *Recorder) Write(name string, token int64, admitted bool, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, Write{Seq: len(r.writes) + 1, Name: name, Token: token, At: at, Admitted: admitted})
}

// Fenced runs write, a fenced write with token (for example a Fence's Admit
// followed by the write, or a RedisFence call), records whether it was
// admitted, and returns its error. A write is admitted when write returns
// nil, and rejected when it returns any error; a test that can tell a
// transport failure from a rejection records with Write instead. Fenced
// calls are serialised, so that the recorded order is the fence's.
func (r *Recorder) Fenced(name string, token int64, write func() error) error {
	r.fenceMu.Lock()
	defer r.fenceMu.Unlock()
	err := write()
	r.Write(name, token, err == nil, time.Now())
	return err
}

// Acquisitions returns a copy of the acquisitions recorded so far, in
// recording order.
func (r *Recorder) Acquisitions() []Acquisition {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Acquisition, len(r.acqs))
	for i, a := range r.acqs {
		out[i] = *a
	}
	return out
}

// Writes returns a copy of the write attempts recorded so far.
func (r *Recorder) Writes() []Write {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.writes)
}

// Check returns every violation in the history recorded so far, ordered by
// kind and name.
func (r *Recorder) Check() []Violation {
	acqs, writes := r.Acquisitions(), r.Writes()
	var vs []Violation
	byName := map[string][]Acquisition{}
	for _, a := range acqs {
		byName[a.Name] = append(byName[a.Name], a)
	}
	for name, as := range byName {
		slices.SortStableFunc(as, func(x, y Acquisition) int { return x.AcquiredAt.Compare(y.AcquiredAt) })
		var top *Acquisition // the earlier acquisition with the highest token
		for i, a := range as {
			for _, b := range as[i+1:] {
				// b acquired no earlier than a (sorted).
				if b.AcquiredAt.Before(a.End()) {
					vs = append(vs, Violation{Overlap, name, fmt.Sprintf("%s held %s..%s; %s acquired at %s, %v before the first's window ended",
						a, r.at(a.AcquiredAt), r.at(a.End()), b, r.at(b.AcquiredAt), a.End().Sub(b.AcquiredAt))})
				}
				if b.Owner != a.Owner && (a.DoneAt.IsZero() || a.DoneAt.After(b.AcquiredAt)) {
					done := "still open"
					if !a.DoneAt.IsZero() {
						done = fmt.Sprintf("closed at %s, %v late", r.at(a.DoneAt), a.DoneAt.Sub(b.AcquiredAt))
					}
					vs = append(vs, Violation{LateDone, name, fmt.Sprintf("%s: Done %s when %s acquired at %s",
						a, done, b, r.at(b.AcquiredAt))})
				}
			}
			if top != nil && a.Token <= top.Token {
				vs = append(vs, Violation{TokenOrder, name, fmt.Sprintf("%s acquired at %s after %s acquired at %s: token %d not above %d",
					a, r.at(a.AcquiredAt), *top, r.at(top.AcquiredAt), a.Token, top.Token)})
			}
			if top == nil || a.Token > top.Token {
				top = &as[i]
			}
		}
	}
	highest := map[string]Write{}
	for _, w := range writes {
		h, seen := highest[w.Name]
		if w.Admitted && seen && w.Token < h.Token {
			vs = append(vs, Violation{StaleWrite, w.Name, fmt.Sprintf("write #%d with token %d admitted at %s after write #%d had shown token %d",
				w.Seq, w.Token, r.at(w.At), h.Seq, h.Token)})
		}
		if !seen || w.Token > h.Token {
			highest[w.Name] = w
		}
	}
	slices.SortStableFunc(vs, func(x, y Violation) int {
		return cmp.Or(cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.Name, y.Name))
	})
	return vs
}

// at formats t as the offset from the Recorder's creation.
func (r *Recorder) at(t time.Time) string {
	return "+" + t.Sub(r.origin).Round(time.Microsecond).String()
}

// Err returns nil if the history has no violation, and otherwise an error
// listing every violation, followed by the whole history for diagnosis.
func (r *Recorder) Err() error {
	vs := r.Check()
	if len(vs) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "history: %d violation(s):\n", len(vs))
	for _, v := range vs {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	b.WriteString(r.Dump())
	return errors.New(b.String())
}

// Kinds returns the set of kinds among Check's violations.
func (r *Recorder) Kinds() map[Kind]int {
	out := map[Kind]int{}
	for _, v := range r.Check() {
		out[v.Kind]++
	}
	return out
}

// Dump formats the whole history, one event per line, for failure
// messages.
func (r *Recorder) Dump() string {
	var b strings.Builder
	b.WriteString("acquisitions (acquired, until, released, lost, done):\n")
	opt := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return r.at(t)
	}
	for _, a := range r.Acquisitions() {
		fmt.Fprintf(&b, "  %s: %s %s %s %s %s\n", a, r.at(a.AcquiredAt), r.at(a.Until), opt(a.ReleasedAt), opt(a.LostAt), opt(a.DoneAt))
	}
	b.WriteString("fenced writes:\n")
	for _, w := range r.Writes() {
		verdict := "rejected"
		if w.Admitted {
			verdict = "admitted"
		}
		fmt.Fprintf(&b, "  #%d %q token %d at %s %s\n", w.Seq, w.Name, w.Token, r.at(w.At), verdict)
	}
	return b.String()
}
