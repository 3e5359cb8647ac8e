package storetest

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

// The error classes: one input gives one class of error on every store and
// in both modes, so Decide, dead-letter reasons, metrics and dashboards
// count it the same way wherever it happens.

// ResultLimiter is implemented by stores whose records cannot hold every
// result the guard may allow (a server's packet or document size limit).
// ResultLimit is the size in bytes of the largest result the store records;
// a larger one is refused with an *idem.InvalidDataError before anything is
// written. The class cases use it to reach the limit; a store without one
// (results up to its column's gigabyte) skips them.
type ResultLimiter interface {
	ResultLimit(ctx context.Context) (int, error)
}

// classTests are run by Run.
var classTests = []struct {
	name string
	fn   func(t *testing.T, s idem.Store)
}{
	{"ClassDuplicateKeyInBatch", testClassDuplicateKeyInBatch},
	{"ClassOversizedResult", testClassOversizedResult},
}

// wantInvalidData fails t unless err is the permanent invalid-data class:
// errors.Is(err, ErrInvalidData), IsPermanent, dead-lettered by Decide with
// reason invalid_data (given the outcome the guard reports for it).
func wantInvalidData(t *testing.T, what string, out idem.Outcome, err error) {
	t.Helper()
	if !errors.Is(err, idem.ErrInvalidData) || !idem.IsPermanent(err) {
		t.Fatalf("%s: %v; want an *idem.InvalidDataError (permanent)", what, err)
	}
	var ide *idem.InvalidDataError
	if !errors.As(err, &ide) {
		t.Fatalf("%s: %T %v; want an *idem.InvalidDataError", what, err, err)
	}
	if a := idem.Decide(idem.Result{Outcome: out}, err); a != idem.ActionDeadLetter {
		t.Fatalf("%s: Decide = %v, want dead_letter", what, a)
	}
	if r := idem.DeadLetterReason(err); r != "invalid_data" {
		t.Fatalf("%s: DeadLetterReason = %q, want invalid_data", what, r)
	}
}

// testClassDuplicateKeyInBatch: a batch that names a key twice is refused
// whole, before anything is written, with the same permanent error on every
// store (idem.ErrDuplicateKeyInBatch inside an *idem.InvalidDataError).
func testClassDuplicateKeyInBatch(t *testing.T, s idem.Store) {
	ctx := context.Background()
	a, b := key("batch-dup-a"), key("batch-dup-b")
	reqs := []idem.ClaimRequest{claimReq(a, "fp", T0), claimReq(b, "fp", T0), claimReq(a, "fp", T0)}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, idem.ErrDuplicateKeyInBatch) {
			t.Fatalf("%s with a repeated key: %v; want idem.ErrDuplicateKeyInBatch", what, err)
		}
		wantInvalidData(t, what, idem.OutcomePermanent, err)
		for _, k := range []idem.Key{a, b} {
			if _, err := s.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
				t.Fatalf("%s refused a batch but wrote %s: Get = %v", what, k, err)
			}
		}
	}
	if bs, ok := s.(storekit.BatchStore); ok {
		_, err := bs.ClaimBatch(ctx, reqs)
		check("BatchStore.ClaimBatch", err)
	}
	_, err := idem.ClaimBatch(ctx, s, reqs)
	check("idem.ClaimBatch", err)
	// Distinct keys still go through, so the refusal was about the repeat.
	if cs, err := idem.ClaimBatch(ctx, s, reqs[:2]); err != nil || len(cs) != 2 ||
		cs[0].Outcome != idem.ClaimAcquired || cs[1].Outcome != idem.ClaimAcquired {
		t.Fatalf("ClaimBatch of distinct keys = %+v, %v", cs, err)
	}
}

// resultLimit returns the store's result limit, or skips t.
func resultLimit(t *testing.T, s any) int {
	t.Helper()
	rl, ok := s.(ResultLimiter)
	if !ok {
		t.Skipf("%T has no result limit under its column's size (storetest.ResultLimiter)", s)
	}
	n, err := rl.ResultLimit(context.Background())
	if err != nil {
		t.Fatalf("ResultLimit: %v", err)
	}
	return n
}

// testClassOversizedResult: a result over the store's own limit is invalid
// data in Complete (the record stays in progress under its owner, who can
// still complete it), and the guard, whose effects are done by then,
// completes the key without the result and acks (ErrResultTooLarge).
func testClassOversizedResult(t *testing.T, s idem.Store) {
	limit := resultLimit(t, s)
	ctx := context.Background()
	k := key("oversized")
	c := mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
	big := bytes.Repeat([]byte("r"), limit+1)
	err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Result: big, Now: T0, ExpiresAt: T0.Add(retention)})
	wantInvalidData(t, "Complete with a result over the store's limit", idem.OutcomePermanent, err)
	if r := mustGet(t, s, k); r.State != idem.StateInProgress || r.Token != c.Record.Token {
		t.Fatalf("after the refused Complete: %+v; want the claim in progress as it was", r)
	}
	mustComplete(t, s, k, c.Record.Token, []byte("small"), T0)

	g := newGuard(t, s, idem.Options{MaxResultSize: limit + 1})
	res, err := g.Do(ctx, idem.Message{ID: "oversized-do", Payload: []byte("x")}, func(context.Context) ([]byte, error) {
		return big, nil
	})
	if !errors.Is(err, idem.ErrResultTooLarge) || res.Outcome != idem.OutcomeProcessed || idem.Decide(res, err) != idem.ActionAck {
		t.Fatalf("Guard.Do with a result the store refuses = %v, %v (%v); want processed, ErrResultTooLarge, ack (the effect happened)",
			res.Outcome, err, idem.Decide(res, err))
	}
	if r := mustGet(t, s, res.Key); r.State != idem.StateCompleted || len(r.Result) != 0 {
		t.Fatalf("after Guard.Do: %v with %d result bytes; want completed without the result", r.State, len(r.Result))
	}
}

// testDoTxOversizedResult: in the inbox a result too large for the guard's
// MaxResultSize, and one too large for the store, roll the transaction back
// as the same permanent class: invalid_data, OutcomePermanent, nothing
// committed.
func testDoTxOversizedResult[Tx any](t *testing.T, s TxStore[Tx]) {
	ctx := context.Background()
	run := func(what string, g *idem.Guard, id string, result []byte) {
		t.Helper()
		res, err := idem.DoTx(ctx, g, idem.Message{ID: id, Payload: []byte("x")}, func(context.Context, Tx) ([]byte, error) {
			return result, nil
		})
		if res.Outcome != idem.OutcomePermanent || !errors.Is(err, idem.ErrResultTooLarge) {
			t.Fatalf("%s: %v, %v; want OutcomePermanent and ErrResultTooLarge", what, res.Outcome, err)
		}
		wantInvalidData(t, what, res.Outcome, err)
		if _, err := s.Get(ctx, res.Key); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("%s: the marker committed (Get = %v); want the transaction rolled back", what, err)
		}
	}
	run("DoTx over the guard's MaxResultSize", newGuard(t, s, idem.Options{MaxResultSize: 16}), "tx-over-guard", bytes.Repeat([]byte("r"), 17))
	limit := resultLimit(t, s)
	run("DoTx over the store's limit", newGuard(t, s, idem.Options{MaxResultSize: limit + 1}), "tx-over-store", bytes.Repeat([]byte("r"), limit+1))
}
