package consumetest

import (
	"context"
	"testing"
)

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
