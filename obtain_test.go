package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/redlockgo/redlock/internal/redistest"
)

// TestWaitCrashedHolder: the holder dies without releasing, so no message
// comes; the waiter acquires when the lease runs out, not a backoff step later.
func TestWaitCrashedHolder(t *testing.T) {
	srv := redistest.Start(t)
	cl := srv.Client(t)
	lk := newLocker(t, cl)
	ctx := context.Background()
	const lease = 500 * time.Millisecond
	if err := cl.Set(ctx, "{redlock:crashed}", "dead-process", lease).Err(); err != nil {
		t.Fatalf("SET = %v", err)
	}
	setAt := time.Now()
	l, err := lk.Lock(ctx, "crashed")
	if err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	after := time.Since(setAt)
	// The next backoff step would come ~500ms after the lease; a loaded
	// machine adds scheduling delay (128ms seen under busy-test).
	if after < lease-5*time.Millisecond || after > lease+250*time.Millisecond {
		t.Errorf("acquired %v after the dead holder's SET, want ~%v (+ scheduling delay, well before a backoff step)", after, lease)
	}
	t.Logf("acquired %v after the crashed holder's %v lease began", after, lease)
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}
