package history

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Now()

// ms is t0 plus n milliseconds: histories below are written on a fixed
// timeline, not measured.
func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// kinds is the kinds of vs, in order.
func kinds(vs []Violation) []Kind {
	out := make([]Kind, len(vs))
	for i, v := range vs {
		out[i] = v.Kind
	}
	return out
}

func TestCleanHistory(t *testing.T) {
	r := New()
	a := r.Acquired("n", "A", 10, ms(0), ms(100))
	r.Write("n", 10, true, ms(1))
	r.Released(a, ms(20))
	r.DoneClosed(a, ms(20))
	b := r.Acquired("n", "B", 11, ms(21), ms(121))
	r.Write("n", 11, true, ms(22))
	r.Write("n", 10, false, ms(23)) // A late: rejected, as it must be
	r.Lost(b, ms(119))
	r.DoneClosed(b, ms(119))
	c := r.Acquired("n", "C", 12, ms(125), ms(225))
	// Another name is independent: its own tokens, its own windows.
	r.Acquired("m", "D", 1, ms(50), ms(150))
	r.DoneClosed(c, ms(130))
	assert.Empty(t, r.Check())
	assert.NoError(t, r.Err())
}

func TestCatchesOverlap(t *testing.T) {
	r := New()
	a := r.Acquired("n", "A", 1, ms(0), ms(100))
	r.Acquired("n", "B", 2, ms(50), ms(150)) // A still valid until 100
	r.DoneClosed(a, ms(40))                  // Done fine, but A's window...
	// ... ends at the earliest of Until, release, loss and Done: 40.
	assert.Empty(t, r.Check(), "Done closed before B: A's window ended at 40")

	r = New()
	r.Acquired("n", "A", 1, ms(0), ms(100))
	r.Acquired("n", "B", 2, ms(50), ms(150))
	vs := r.Check()
	assert.Equal(t, []Kind{LateDone, Overlap}, kinds(vs))
	err := r.Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "overlap on \"n\"")
	assert.Contains(t, err.Error(), "50ms before the first's window ended")
}

func TestReleaseEndsWindow(t *testing.T) {
	r := New()
	a := r.Acquired("n", "A", 1, ms(0), ms(100))
	r.Released(a, ms(30))
	r.DoneClosed(a, ms(30))
	r.Acquired("n", "B", 2, ms(31), ms(131))
	assert.Empty(t, r.Check())
}

func TestCatchesTokenGoingBackwards(t *testing.T) {
	r := New()
	for i, tok := range []int64{5, 7, 6} {
		a := r.Acquired("n", fmt.Sprint(i), tok, ms(10*i), ms(10*i+5))
		r.DoneClosed(a, ms(10*i+5))
	}
	vs := r.Check()
	require.Equal(t, []Kind{TokenOrder}, kinds(vs))
	assert.Contains(t, vs[0].Detail, "token 6 not above 7")

	// An equal token is as bad: a fence would admit both holders.
	r = New()
	a := r.Acquired("n", "A", 5, ms(0), ms(5))
	r.DoneClosed(a, ms(5))
	r.Acquired("n", "B", 5, ms(10), ms(15))
	assert.Equal(t, []Kind{TokenOrder}, kinds(r.Check()))
}

func TestCatchesStaleFencedWrite(t *testing.T) {
	r := New()
	r.Write("n", 1, true, ms(0))
	r.Write("n", 2, true, ms(1))
	r.Write("n", 1, true, ms(2)) // admitted after 2: the fence failed
	r.Write("n", 1, false, ms(3))
	r.Write("other", 1, true, ms(4)) // another resource: fine
	vs := r.Check()
	require.Equal(t, []Kind{StaleWrite}, kinds(vs))
	assert.Contains(t, vs[0].Detail, "write #3 with token 1")
	assert.Contains(t, vs[0].Detail, "token 2")
}

func TestCatchesLateDone(t *testing.T) {
	r := New()
	a := r.Acquired("n", "A", 1, ms(0), ms(100))
	r.Lost(a, ms(100)) // the holder stopped at Until...
	r.DoneClosed(a, ms(130))
	r.Acquired("n", "B", 2, ms(120), ms(220)) // ... but Done was still open here
	vs := r.Check()
	require.Equal(t, []Kind{LateDone}, kinds(vs))
	assert.Contains(t, vs[0].Detail, "10ms late")

	// Never closed at all.
	r = New()
	a = r.Acquired("n", "A", 1, ms(0), ms(100))
	r.Released(a, ms(10))
	r.Acquired("n", "B", 2, ms(120), ms(220))
	vs = r.Check()
	require.Equal(t, []Kind{LateDone}, kinds(vs))
	assert.Contains(t, vs[0].Detail, "still open")
}

func TestFencedSerialisesAndRecords(t *testing.T) {
	r := New()
	var mu sync.Mutex
	highest := int64(0)
	admit := func(tok int64) error {
		mu.Lock()
		defer mu.Unlock()
		if tok < highest {
			return errors.New("stale")
		}
		highest = tok
		return nil
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 50 {
				tok := int64(i*8 + w)
				_ = r.Fenced("n", tok, func() error { return admit(tok) })
			}
		})
	}
	wg.Wait()
	assert.Len(t, r.Writes(), 400)
	assert.Empty(t, r.Check(), "a correct fence, recorded through Fenced")

	// A broken fence (admits everything) is caught.
	r = New()
	for _, tok := range []int64{3, 9, 4} {
		_ = r.Fenced("n", tok, func() error { return nil })
	}
	assert.Equal(t, []Kind{StaleWrite}, kinds(r.Check()))
}

func TestRecorderConcurrent(t *testing.T) {
	r := New()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 100 {
				a := r.Acquired(fmt.Sprintf("n%d", w), "o", int64(i+1), ms(2*i), ms(2*i+1))
				r.DoneClosed(a, ms(2*i+1))
				r.Released(a, ms(2*i+1))
				r.Write(fmt.Sprintf("n%d", w), int64(i+1), true, ms(2*i))
			}
		})
	}
	wg.Wait()
	assert.Len(t, r.Acquisitions(), 800)
	assert.Empty(t, r.Check())
	assert.Empty(t, r.Kinds())
}
