package consumetest

import (
	"context"
	"testing"
	"time"
)

// AwaitSettled waits until done is closed (every message settled). It fails
// t at once if a consumer stops first (an error on stopped), or after a
// minute, reporting settled() of total.
func AwaitSettled(t testing.TB, done <-chan struct{}, stopped <-chan error, settled func() int, total int) {
	t.Helper()
	select {
	case <-done:
	case err := <-stopped:
		t.Fatalf("a consumer stopped early: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatalf("not every message was settled (%d of %d)", settled(), total)
	}
}

// ShutdownWaits checks a graceful shutdown while a handler is blocked on
// release: after cancel (Run's context), Run must not have returned with
// the handler in flight; once release is closed it must return nil.
func ShutdownWaits(t testing.TB, cancel context.CancelFunc, runDone <-chan error, release chan struct{}) {
	t.Helper()
	cancel()
	select {
	case err := <-runDone:
		t.Fatalf("Run returned %v with a handler in flight", err)
	default:
	}
	close(release)
	if err := <-runDone; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
}
