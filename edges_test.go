package idem_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
)

// hangingRenew is a store whose renewals hang until their context ends, as a
// renewal does behind an operator's row lock or on a half-open connection.
type hangingRenew struct {
	idem.Store
	started chan struct{}
}

func (h *hangingRenew) Renew(ctx context.Context, _ idem.RenewRequest) error {
	select {
	case h.started <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

// A renewal that hangs never keeps Do waiting after the handler returned:
// it is cancelled with the handler's end (and bounded by StoreTimeout).
func TestHangingRenewalDoesNotHoldDo(t *testing.T) {
	hs := &hangingRenew{Store: memory.New(), started: make(chan struct{}, 1)}
	g := guard(t, hs, idem.Options{Lease: 300 * time.Millisecond, StoreTimeout: time.Hour})
	done := make(chan error, 1)
	go func() {
		_, err := g.Do(context.Background(), idem.Message{ID: "m", Payload: []byte("x")}, func(ctx context.Context) ([]byte, error) {
			select {
			case <-hs.started: // a renewal is in flight, and hangs
				return nil, nil
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Do still waits for a hung renewal a minute after the handler returned")
	}
}

// Each renewal is bounded by StoreTimeout even while the handler runs, so
// a hung one does not stop the next tick (due a third of the lease after
// the hung one was sent, well before the lease runs out).
func TestRenewalBoundedByStoreTimeout(t *testing.T) {
	hs := &hangingRenew{Store: memory.New(), started: make(chan struct{}, 8)}
	g := guard(t, hs, idem.Options{Lease: 300 * time.Millisecond, StoreTimeout: 20 * time.Millisecond})
	_, err := g.Do(context.Background(), idem.Message{ID: "m", Payload: []byte("x")}, func(ctx context.Context) ([]byte, error) {
		for range 2 { // a second renewal started: the first one ended
			select {
			case <-hs.started:
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		return nil, nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
}

// A short id spelled like the stored form of a long id is a different key.
func TestStoredIDsDisjoint(t *testing.T) {
	long := idem.Key{Scope: "s", ID: strings.Repeat("x", idem.MaxIDLen+1)}
	look := idem.Key{Scope: "s", ID: long.StoredID()}
	if look.StoredID() == long.StoredID() {
		t.Fatalf("%q and a %d-byte id share stored id %q", look.ID, len(long.ID), long.StoredID())
	}
	if short := (idem.Key{Scope: "s", ID: "plain"}); short.StoredID() != "plain" {
		t.Fatalf("plain id stored as %q", short.StoredID())
	}
	if !strings.HasPrefix(look.StoredID(), "sha256:") || len(look.StoredID()) != 71 {
		t.Fatalf("hashed id %q", look.StoredID())
	}
}

// dataErrStore refuses every claim as invalid data.
type dataErrStore struct{ idem.Store }

func (dataErrStore) Claim(context.Context, idem.ClaimRequest) (idem.Claim, error) {
	return idem.Claim{}, &idem.InvalidDataError{Op: "claim", Err: errors.New("SQLSTATE 22021")}
}

// A store's data error is permanent: dead-lettered, never a retry loop.
func TestStoreDataErrorIsPermanent(t *testing.T) {
	g := guard(t, dataErrStore{memory.New()}, idem.Options{})
	res, err := g.Do(context.Background(), idem.Message{ID: "m", Payload: []byte("x")}, func(context.Context) ([]byte, error) {
		t.Fatal("handler ran")
		return nil, nil
	})
	if idem.Decide(res, err) != idem.ActionDeadLetter || res.Outcome != idem.OutcomePermanent ||
		idem.DeadLetterReason(err) != "invalid_data" {
		t.Fatalf("data error: %v, %v -> %v", res.Outcome, err, idem.Decide(res, err))
	}
}

func TestRetryAfterFollowsLease(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	res := idem.Result{Outcome: idem.OutcomeInProgress, Record: idem.Record{State: idem.StateInProgress, LeaseUntil: now.Add(20 * time.Second)}}
	err := &idem.StateError{Err: idem.ErrInProgress, Record: res.Record}
	for range 100 {
		d := idem.RetryAfter(res, err, now, time.Second)
		if d < 20*time.Second || d > 21*time.Second+10*time.Millisecond {
			t.Fatalf("RetryAfter = %v, want the lease's 20s plus at most 1s of jitter", d)
		}
	}
	if d := idem.RetryAfter(idem.Result{}, errors.New("transient"), now, 3*time.Second); d != 3*time.Second {
		t.Fatalf("RetryAfter(transient) = %v, want the fallback", d)
	}
}

func TestDedupID(t *testing.T) {
	a, b := idem.DedupID("order-1", "fpA"), idem.DedupID("order-1", "fpB")
	if a == b || a != idem.DedupID("order-1", "fpA") || !strings.HasPrefix(a, "order-1") {
		t.Fatalf("DedupID: %q %q", a, b)
	}
	if idem.DedupID("order-1", "") != "order-1" {
		t.Fatal("DedupID without a fingerprint")
	}
}

func TestDeadLetterHeaders(t *testing.T) {
	created := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := idem.Record{State: idem.StateCompleted, Fingerprint: "stored", Token: 7, Attempts: 2, CreatedAt: created}
	k := idem.Key{Scope: "s", ID: "order-1"}
	err := &idem.ConflictError{Key: k, Fingerprint: "mine", Record: rec}
	h := idem.DeadLetterHeaders(idem.Result{Key: k, Outcome: idem.OutcomeConflict}, err)
	want := map[string]string{
		idem.HeaderReason: "conflict", idem.HeaderFingerprint: "mine", idem.HeaderStoredFingerprint: "stored",
		idem.HeaderStoredState: "completed", idem.HeaderStoredToken: "7", idem.HeaderStoredAttempts: "2",
		idem.HeaderStoredCreatedAt: "2030-01-01T00:00:00Z", idem.HeaderDeadLetterKey: "s/order-1",
	}
	for name, v := range want {
		if h[name] != v {
			t.Fatalf("%s = %q, want %q (all: %v)", name, h[name], v, h)
		}
	}
	if h[idem.HeaderError] == "" {
		t.Fatal("no error header")
	}
}

// A guard over a store without records refuses two-phase work.
func TestNewInboxRefusesDo(t *testing.T) {
	g, err := idem.NewInbox[int](noTx{}, idem.Options{Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.Do(context.Background(), idem.Message{ID: "m"}, func(context.Context) ([]byte, error) {
		t.Fatal("handler ran without a record")
		return nil, nil
	})
	if !errors.Is(err, idem.ErrNoRecords) || idem.DeadLetterReason(err) != "no_records" {
		t.Fatalf("Do on an inbox guard: %v, want ErrNoRecords", err)
	}
	g2, _ := idem.NewInbox[int](noTx{}, idem.Options{Scope: "s", MissingKey: idem.MissingKeyProcess})
	if _, err := g2.Do(context.Background(), idem.Message{}, func(context.Context) ([]byte, error) {
		t.Fatal("unkeyed handler ran on a guard without records")
		return nil, nil
	}); !errors.Is(err, idem.ErrNoRecords) {
		t.Fatalf("unkeyed Do on an inbox guard: %v", err)
	}
	res, err := idem.DoTx(context.Background(), g, idem.Message{ID: "m"}, func(context.Context, int) ([]byte, error) { return []byte("ok"), nil })
	if err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("DoTx on an inbox guard: %v, %v", res.Outcome, err)
	}
}

// noTx is a TxStore over int transactions that keeps nothing.
type noTx struct{}

func (noTx) InTx(ctx context.Context, fn func(context.Context, int) error) error { return fn(ctx, 0) }
func (noTx) Mark(_ context.Context, _ int, req idem.ClaimRequest) (idem.Claim, error) {
	return idem.Claim{Outcome: idem.ClaimAcquired, Record: idem.Record{Scope: req.Key.Scope, ID: req.Key.StoredID(), State: idem.StateCompleted}}, nil
}
func (noTx) SaveResult(context.Context, int, idem.Key, []byte) error { return nil }

func TestDeadLetterErrorHeaderIsOneLineOfText(t *testing.T) {
	long := strings.Repeat("é", 600) + "\nsecond line \xff"
	h := idem.DeadLetterHeaders(idem.Result{}, errors.New(long))
	v := h[idem.HeaderError]
	if len(v) > 1024 || strings.ContainsAny(v, "\r\n") || !utf8.ValidString(v) {
		t.Fatalf("error header of %d bytes, valid UTF-8 %v: %q", len(v), utf8.ValidString(v), v[:40])
	}
}

// refusingResult refuses any non-empty result as invalid data, once per call.
type refusingResult struct {
	idem.Store
	calls int
}

func (r *refusingResult) Complete(ctx context.Context, req idem.CompleteRequest) error {
	r.calls++
	if len(req.Result) > 0 {
		return &idem.InvalidDataError{Op: "complete", Err: errors.New("value too long for column")}
	}
	return r.Store.Complete(ctx, req)
}

// A result the store cannot take does not leave a done effect in progress:
// the key is completed without it and the delivery is acked.
func TestCompleteRefusedResult(t *testing.T) {
	rs := &refusingResult{Store: memory.New()}
	g := guard(t, rs, idem.Options{})
	res, err := g.Do(context.Background(), idem.Message{ID: "m", Payload: []byte("x")}, func(context.Context) ([]byte, error) {
		return []byte("big"), nil
	})
	if !errors.Is(err, idem.ErrResultTooLarge) || res.Outcome != idem.OutcomeProcessed || idem.Decide(res, err) != idem.ActionAck {
		t.Fatalf("refused result: %v, %v -> %v", res.Outcome, err, idem.Decide(res, err))
	}
	if rs.calls != 2 {
		t.Fatalf("%d Complete calls, want the refused one and one without the result", rs.calls)
	}
	r, _ := rs.Get(context.Background(), res.Key)
	if r.State != idem.StateCompleted {
		t.Fatalf("record %+v, want completed", r)
	}
}
