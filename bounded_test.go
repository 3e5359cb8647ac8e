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

// hangingStore is the memory store with one operation that hangs until its
// context ends, as a call does behind another session's row lock or on a
// store that stopped answering. The other operations answer.
type hangingStore struct {
	*memory.Store
	op   string // "claim", "claim batch", "renew", "release", "complete", "get"
	hung atomic.Int32
	stop chan struct{} // closed when the test ends: unbounded code hangs until then
}

func newHangingStore(t *testing.T, op string) *hangingStore {
	h := &hangingStore{Store: memory.New(), op: op, stop: make(chan struct{})}
	t.Cleanup(func() { close(h.stop) })
	return h
}

func (h *hangingStore) hang(ctx context.Context, op string) error {
	if op != h.op {
		return nil
	}
	h.hung.Add(1)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-h.stop:
		return errors.New("the test ended with the call still hanging")
	}
}

func (h *hangingStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := h.hang(ctx, "claim"); err != nil {
		return idem.Claim{}, err
	}
	return h.Store.Claim(ctx, req)
}

func (h *hangingStore) ClaimBatch(ctx context.Context, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	if err := h.hang(ctx, "claim batch"); err != nil {
		return nil, err
	}
	return h.Store.ClaimBatch(ctx, reqs)
}

func (h *hangingStore) Renew(ctx context.Context, req idem.RenewRequest) error {
	if err := h.hang(ctx, "renew"); err != nil {
		return err
	}
	return h.Store.Renew(ctx, req)
}

func (h *hangingStore) Release(ctx context.Context, req idem.ReleaseRequest) error {
	if err := h.hang(ctx, "release"); err != nil {
		return err
	}
	return h.Store.Release(ctx, req)
}

// Complete hangs for "complete"; for "get" it completes and then loses the
// reply (ErrLeaseLost on the retry), so the guard reads the record back.
func (h *hangingStore) Complete(ctx context.Context, req idem.CompleteRequest) error {
	if err := h.hang(ctx, "complete"); err != nil {
		return err
	}
	if err := h.Store.Complete(ctx, req); err != nil || h.op != "get" {
		return err
	}
	return idem.ErrLeaseLost
}

func (h *hangingStore) Get(ctx context.Context, key idem.Key) (idem.Record, error) {
	if err := h.hang(ctx, "get"); err != nil {
		return idem.Record{}, err
	}
	return h.Store.Get(ctx, key)
}

// hangingTx is a TxStore over int transactions whose Mark or SaveResult
// hangs until its context ends; InTx reports whether fn's work committed.
type hangingTx struct {
	op        string // "mark", "save result"
	stop      chan struct{}
	committed bool
}

func (h *hangingTx) InTx(ctx context.Context, fn func(context.Context, int) error) error {
	err := fn(ctx, 0)
	h.committed = err == nil
	return err
}

func (h *hangingTx) wait(ctx context.Context, op string) error {
	if op != h.op {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-h.stop:
		return errors.New("the test ended with the call still hanging")
	}
}

func (h *hangingTx) Mark(ctx context.Context, _ int, req idem.ClaimRequest) (idem.Claim, error) {
	if err := h.wait(ctx, "mark"); err != nil {
		return idem.Claim{}, err
	}
	return idem.Claim{Outcome: idem.ClaimAcquired, Record: idem.Record{Scope: req.Key.Scope, ID: req.Key.StoredID(), State: idem.StateCompleted}}, nil
}

func (h *hangingTx) SaveResult(ctx context.Context, _ int, _ idem.Key, _ []byte) error {
	return h.wait(ctx, "save result")
}

// within runs f and fails the test if it has not returned a minute after a
// StoreTimeout of a few milliseconds: the call waits on a hung store.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s still waits on a hung store call a minute after its StoreTimeout", what)
	}
}

// boundedOpts keeps the lease long (the fake clock decides when it ends) and
// the store calls short.
func boundedOpts(c *clock) idem.Options {
	return idem.Options{Scope: "test", Clock: c.Now, Lease: 30 * time.Second, StoreTimeout: 20 * time.Millisecond}
}

// wantRetryableStoreError checks that err is a store failure the consumer
// retries.
func wantRetryableStoreError(t *testing.T, res idem.Result, err error) {
	t.Helper()
	var se *idem.StoreError
	if !errors.As(err, &se) || res.Outcome != idem.OutcomeStoreError || idem.Decide(res, err) != idem.ActionRetry {
		t.Fatalf("got %v, %v (%v), want a retryable *StoreError", res.Outcome, err, idem.Decide(res, err))
	}
}

func mustNotRun(t *testing.T) idem.Handler {
	return func(context.Context) ([]byte, error) {
		t.Error("the handler ran")
		return nil, nil
	}
}

// A batch ticket that waited for its turn renews its lease before the
// handler: a renewal that hangs is bounded by StoreTimeout, as the
// heartbeat's are, so one stuck row lock does not stall the partition. The
// key is given back and the handler does not run.
func TestTicketRenewalBoundedByStoreTimeout(t *testing.T) {
	c := newClock()
	hs := newHangingStore(t, "renew")
	g := guard(t, hs, boundedOpts(c))
	ctx := context.Background()
	tickets, err := g.ClaimBatch(ctx, []idem.Message{{ID: "a", Payload: []byte("p")}})
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(15 * time.Second) // half the lease spent waiting: Do renews first
	var res idem.Result
	within(t, "Ticket.Do", func() { res, err = tickets[0].Do(ctx, mustNotRun(t)) })
	wantRetryableStoreError(t, res, err)
	if hs.hung.Load() == 0 {
		t.Fatal("the renewal never reached the store")
	}
	if r, _ := hs.Store.Get(ctx, res.Key); r.State != idem.StateReleased {
		t.Fatalf("record %s after the failed renewal, want released for the redelivery", r.State)
	}
}

// A claim that hangs fails the message within StoreTimeout; nothing is
// claimed, the handler does not run.
func TestClaimBoundedByStoreTimeout(t *testing.T) {
	hs := newHangingStore(t, "claim")
	g := guard(t, hs, boundedOpts(newClock()))
	var (
		res idem.Result
		err error
	)
	within(t, "Do", func() {
		res, err = g.Do(context.Background(), idem.Message{ID: "a", Payload: []byte("p")}, mustNotRun(t))
	})
	wantRetryableStoreError(t, res, err)
	if _, gerr := hs.Store.Get(context.Background(), res.Key); !errors.Is(gerr, idem.ErrNotFound) {
		t.Fatalf("a record after the failed claim: %v", gerr)
	}
}

// A batch claim that hangs fails the batch within StoreTimeout; nothing is
// claimed.
func TestClaimBatchBoundedByStoreTimeout(t *testing.T) {
	hs := newHangingStore(t, "claim batch")
	g := guard(t, hs, boundedOpts(newClock()))
	var err error
	within(t, "ClaimBatch", func() {
		_, err = g.ClaimBatch(context.Background(), []idem.Message{{ID: "a"}, {ID: "b"}})
	})
	var se *idem.StoreError
	if !errors.As(err, &se) {
		t.Fatalf("ClaimBatch: %v, want a *StoreError", err)
	}
	if hs.Len() != 0 {
		t.Fatalf("%d records after the failed batch claim", hs.Len())
	}
}

// Ticket.Release is bounded by StoreTimeout (a failed release leaves the key
// to its lease) and runs even when the caller's context has ended, as a
// consumer losing its partition on shutdown calls it.
func TestTicketReleaseBoundedByStoreTimeout(t *testing.T) {
	c := newClock()
	hs := newHangingStore(t, "release")
	g := guard(t, hs, boundedOpts(c))
	tickets, err := g.ClaimBatch(context.Background(), []idem.Message{{ID: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	within(t, "Ticket.Release", func() { err = tickets[0].Release(context.Background()) })
	var se *idem.StoreError
	if !errors.As(err, &se) {
		t.Fatalf("Release: %v, want a *StoreError", err)
	}
	if r, _ := hs.Store.Get(context.Background(), tickets[0].Key()); r.State != idem.StateInProgress {
		t.Fatalf("record %s, want it left in progress to its lease", r.State)
	}
}

func TestTicketReleaseAfterCallerCancels(t *testing.T) {
	s := memory.New()
	g := guard(t, s, idem.Options{})
	tickets, err := g.ClaimBatch(context.Background(), []idem.Message{{ID: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // shutting down
	if err := tickets[0].Release(ctx); err != nil {
		t.Fatalf("Release on shutdown: %v", err)
	}
	if r, _ := s.Get(context.Background(), tickets[0].Key()); r.State != idem.StateReleased {
		t.Fatalf("record %s, want released", r.State)
	}
}

// The settling calls were bounded already; these hold the one helper to it.
func TestSettleBoundedByStoreTimeout(t *testing.T) {
	for _, tc := range []struct {
		op      string
		h       idem.Handler
		outcome idem.Outcome
		state   idem.State
	}{
		// The record stays to its lease; the redelivery retakes it.
		{"complete", ok("r"), idem.OutcomeStoreError, idem.StateInProgress},
		// A failed handler's key is given back; a hung release leaves it to its lease.
		{"release", func(context.Context) ([]byte, error) { return nil, errors.New("failed") }, idem.OutcomeFailed, idem.StateInProgress},
		// The complete committed and its reply was lost; the read back hangs:
		// reported as lost (the redelivery finds the key completed).
		{"get", ok("r"), idem.OutcomeLeaseLost, idem.StateCompleted},
	} {
		t.Run(tc.op, func(t *testing.T) {
			hs := newHangingStore(t, tc.op)
			g := guard(t, hs, boundedOpts(newClock()))
			var (
				res idem.Result
				err error
			)
			within(t, "Do", func() { res, err = g.Do(context.Background(), idem.Message{ID: "a", Payload: []byte("p")}, tc.h) })
			if err == nil || res.Outcome != tc.outcome || idem.Decide(res, err) != idem.ActionRetry {
				t.Fatalf("got %v, %v, want %v and a retry", res.Outcome, err, tc.outcome)
			}
			if hs.hung.Load() == 0 {
				t.Fatalf("no %s reached the store", tc.op)
			}
			if r, _ := hs.Store.Get(context.Background(), res.Key); r.State != tc.state {
				t.Fatalf("record %s, want %s", r.State, tc.state)
			}
		})
	}
}

// DoTx's own transaction: its mark and its result are store calls of the
// guard, bounded by StoreTimeout; the transaction rolls back and the
// message is retried.
func TestDoTxStoreCallsBoundedByStoreTimeout(t *testing.T) {
	for _, tc := range []struct {
		op      string
		handled bool
	}{
		{"mark", false},
		{"save result", true},
	} {
		t.Run(tc.op, func(t *testing.T) {
			ts := &hangingTx{op: tc.op, stop: make(chan struct{})}
			t.Cleanup(func() { close(ts.stop) })
			opts := boundedOpts(newClock())
			g, err := idem.NewInbox[int](ts, opts)
			if err != nil {
				t.Fatal(err)
			}
			handled := false
			var res idem.Result
			within(t, "DoTx", func() {
				res, err = idem.DoTx(context.Background(), g, idem.Message{ID: "a"}, func(context.Context, int) ([]byte, error) {
					handled = true
					return []byte("r"), nil
				})
			})
			wantRetryableStoreError(t, res, err)
			if handled != tc.handled || ts.committed {
				t.Fatalf("handler ran %v (want %v), committed %v", handled, tc.handled, ts.committed)
			}
		})
	}
}
