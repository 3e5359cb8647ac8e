package idem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
)

// The guard's heartbeat drives a ContextWithRenewal function: called after
// each lease renewal while the handler runs, never after it returned.
func TestRenewalRidesTheHeartbeat(t *testing.T) {
	g, err := idem.New(memory.New(), idem.Options{Scope: "renewal", Lease: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	third := make(chan struct{})
	ctx := idem.ContextWithRenewal(context.Background(), func(ctx context.Context) error {
		if _, ok := idem.KeyFromContext(ctx); !ok {
			t.Error("renewal without the handler's context")
		}
		if calls.Add(1) == 3 {
			close(third)
		}
		return nil
	})
	_, err = g.DoKey(ctx, idem.Key{Scope: "renewal", ID: "slow"}, "", func(ctx context.Context) ([]byte, error) {
		select {
		case <-third:
		case <-time.After(10 * time.Second):
			t.Error("three lease renewals did not call the renewal function")
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	after := calls.Load()
	time.Sleep(200 * time.Millisecond) // two renewal periods
	if calls.Load() != after {
		t.Fatal("renewal called after the handler returned")
	}
}

// A renewal that reports the message lost cancels the handler with its
// error as the cause, and the claim is released for the redelivery.
func TestRenewalLostCancelsHandler(t *testing.T) {
	store := memory.New()
	g, err := idem.New(store, idem.Options{Scope: "renewal", Lease: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	errLost := errors.New("lock lost")
	ctx := idem.ContextWithRenewal(context.Background(), func(context.Context) error { return errLost })
	key := idem.Key{Scope: "renewal", ID: "lost"}
	var cause error
	_, err = g.DoKey(ctx, key, "", func(ctx context.Context) ([]byte, error) {
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return nil, ctx.Err()
		case <-time.After(10 * time.Second):
			return nil, errors.New("not cancelled")
		}
	})
	if !errors.Is(cause, errLost) {
		t.Fatalf("handler's cause %v, want the renewal's error", cause)
	}
	if err == nil {
		t.Fatal("Do succeeded")
	}
	rec, gerr := store.Get(context.Background(), key)
	if gerr != nil || rec.State != idem.StateReleased {
		t.Fatalf("record %+v %v; want released", rec, gerr)
	}
}

// pingTx is noTx whose server answers Ping or not.
type pingTx struct {
	noTx
	down bool
}

func (p *pingTx) Ping(context.Context) error {
	if p.down {
		return errors.New("connection refused")
	}
	return nil
}

// A transactional handler that fails while its store does not answer (its
// statements met a server restarting) is the store's failure: a retryable
// StoreError, so a consumer holds the message through the outage instead
// of counting a failed delivery; with the store answering, the failure is
// the handler's, and a permanent one stays the handler's either way.
func TestTxHandlerFailureWhileStoreDown(t *testing.T) {
	ts := &pingTx{}
	g, err := idem.NewInbox[int](ts, idem.Options{Scope: "tx"})
	if err != nil {
		t.Fatal(err)
	}
	connErr := errors.New("conn closed")
	do := func(id string, herr error) (idem.Result, error) {
		return idem.DoTx(context.Background(), g, idem.Message{ID: id}, func(context.Context, int) ([]byte, error) { return nil, herr })
	}
	if res, err := do("up", connErr); res.Outcome != idem.OutcomeFailed || !errors.Is(err, connErr) {
		t.Fatalf("store answering: %v, %v; want the handler's failure", res.Outcome, err)
	}
	ts.down = true
	res, err := do("down", connErr)
	var se *idem.StoreError
	if res.Outcome != idem.OutcomeStoreError || !errors.As(err, &se) || !errors.Is(err, connErr) || idem.IsPermanent(err) {
		t.Fatalf("store down: %v, %v; want a retryable StoreError wrapping the handler's error", res.Outcome, err)
	}
	perm := idem.Permanent(errors.New("card rejected"))
	if res, err := do("perm", perm); res.Outcome == idem.OutcomeStoreError || !idem.IsPermanent(err) {
		t.Fatalf("permanent failure with the store down: %v, %v; want it the handler's", res.Outcome, err)
	}
}
