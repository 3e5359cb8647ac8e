package storetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// TxStore is a store with a transactional inbox over Tx.
type TxStore[Tx any] interface {
	idem.Store
	idem.TxStore[Tx]
}

// RunTx runs the transactional-inbox conformance suite: markers commit and
// roll back with the transaction, concurrent transactions marking one key
// resolve to exactly one acquirer, and markers interoperate with two-phase
// records. Each subtest gets a fresh store.
func RunTx[Tx any](t *testing.T, newStore func(t *testing.T) TxStore[Tx]) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s TxStore[Tx])
	}{
		{"MarkCommitThenDuplicate", testMarkCommit[Tx]},
		{"MarkRollbackLeavesNothing", testMarkRollback[Tx]},
		{"ConcurrentMarksOneWinner", testConcurrentMarks[Tx]},
		{"MarkSeesTwoPhaseInProgress", testMarkInProgress[Tx]},
		{"MarkRetakesExpired", testMarkExpired[Tx]},
		{"DoTxOnce", testDoTx[Tx]},
		{"MarkInvalidDataZeroTimes", testMarkZeroTimes[Tx]},
		{"MarkTokenUniqueAcrossDeletion", testMarkTokenAcrossDeletion[Tx]},
		{"MarkFingerprintSticksAfterRelease", testMarkFingerprintSticksAfterRelease[Tx]},
		{"DoTxRawFingerprint", testDoTxRawFingerprint[Tx]},
		{"DoTxOversizedResultInvalidData", testDoTxOversizedResult[Tx]},
		{"MarkStalePastRetention", testMarkStalePastRetention[Tx]},
		{"MarkTimesAtEpoch", testMarkTimesAtEpoch[Tx]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore(t)) })
	}
}

func mark[Tx any](t *testing.T, s TxStore[Tx], req idem.ClaimRequest, result []byte, fail error) (idem.Claim, error) {
	t.Helper()
	var c idem.Claim
	err := s.InTx(context.Background(), func(ctx context.Context, tx Tx) error {
		var err error
		if c, err = s.Mark(ctx, tx, req); err != nil {
			return err
		}
		if c.Outcome == idem.ClaimAcquired && result != nil {
			if err := s.SaveResult(ctx, tx, req.Key, result); err != nil {
				return err
			}
		}
		return fail
	})
	return c, err
}

func testMarkCommit[Tx any](t *testing.T, s TxStore[Tx]) {
	k := key("tx-1")
	c, err := mark(t, s, claimReq(k, "fp", T0), []byte("receipt"), nil)
	if err != nil || c.Outcome != idem.ClaimAcquired {
		t.Fatalf("first Mark = %v, %v", c.Outcome, err)
	}
	got := mustGet(t, s, k)
	if got.State != idem.StateCompleted || string(got.Result) != "receipt" || got.Fingerprint != "fp" || got.Token < 1 ||
		!sameTime(got.ExpiresAt, T0.Add(retention)) {
		t.Fatalf("marker after commit = %+v", got)
	}
	d, err := mark(t, s, claimReq(k, "fp", T0.Add(time.Second)), nil, nil)
	if err != nil || d.Outcome != idem.ClaimDuplicate || string(d.Record.Result) != "receipt" {
		t.Fatalf("Mark after commit = %v %+v, %v", d.Outcome, d.Record, err)
	}
	// A two-phase claim sees the marker as a duplicate too.
	mustClaim(t, s, claimReq(k, "fp", T0.Add(time.Second)), idem.ClaimDuplicate)
}

func testMarkRollback[Tx any](t *testing.T, s TxStore[Tx]) {
	k := key("tx-2")
	boom := errors.New("business write failed")
	if _, err := mark(t, s, claimReq(k, "fp", T0), []byte("x"), boom); !errors.Is(err, boom) {
		t.Fatalf("InTx returned %v, want the handler's error", err)
	}
	if _, err := s.Get(context.Background(), k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("marker survived a rollback: %v", err)
	}
	c, err := mark(t, s, claimReq(k, "fp", T0), nil, nil)
	if err != nil || c.Outcome != idem.ClaimAcquired {
		t.Fatalf("Mark after rollback = %v, %v", c.Outcome, err)
	}
}

func testConcurrentMarks[Tx any](t *testing.T, s TxStore[Tx]) {
	const goroutines, keys = 16, 8
	for i := range keys {
		k := key(fmt.Sprintf("tx-race-%d", i))
		var (
			wg       sync.WaitGroup
			start    = make(chan struct{})
			mu       sync.Mutex
			outcomes = map[idem.ClaimOutcome]int{}
			errs     []error
		)
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				c, err := mark(t, s, claimReq(k, "fp", T0), []byte("r"), nil)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				outcomes[c.Outcome]++
			}()
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("key %s: %d transactions failed, first: %v", k, len(errs), errs[0])
		}
		if outcomes[idem.ClaimAcquired] != 1 || outcomes[idem.ClaimDuplicate] != goroutines-1 {
			t.Fatalf("key %s: outcomes %v, want 1 acquired and %d duplicates", k, outcomes, goroutines-1)
		}
	}
}

func testMarkInProgress[Tx any](t *testing.T, s TxStore[Tx]) {
	k := key("tx-3")
	mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
	c, err := mark(t, s, claimReq(k, "fp", T0.Add(time.Second)), nil, nil)
	if err != nil || c.Outcome != idem.ClaimInProgress {
		t.Fatalf("Mark over a live two-phase claim = %v, %v", c.Outcome, err)
	}
	c, err = mark(t, s, claimReq(k, "fp", T0.Add(lease+time.Second)), nil, nil)
	if err != nil || c.Outcome != idem.ClaimStale {
		t.Fatalf("Mark over a stale two-phase claim = %v, %v (never taken over in a transaction)", c.Outcome, err)
	}
}

func testMarkExpired[Tx any](t *testing.T, s TxStore[Tx]) {
	k := key("tx-4")
	first, err := mark(t, s, claimReq(k, "fp1", T0), []byte("old"), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := mark(t, s, claimReq(k, "fp2", T0.Add(retention)), nil, nil)
	if err != nil || c.Outcome != idem.ClaimAcquired || c.Record.Token <= first.Record.Token {
		t.Fatalf("Mark over an expired marker = %v %+v, %v", c.Outcome, c.Record, err)
	}
	got := mustGet(t, s, k)
	if got.Fingerprint != "fp2" || len(got.Result) != 0 || got.State != idem.StateCompleted {
		t.Fatalf("renewed marker = %+v", got)
	}
}

// testDoTx drives idem.DoTx from many goroutines with one message: the
// handler's transaction commits once.
func testDoTx[Tx any](t *testing.T, s TxStore[Tx]) {
	g := newGuard(t, s, idem.Options{})
	msg := idem.Message{ID: "dotx", Payload: []byte("charge 5")}
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		mu      sync.Mutex
		commits int
		got     = map[idem.Outcome]int{}
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := idem.DoTx(context.Background(), g, msg, func(ctx context.Context, tx Tx) ([]byte, error) {
				return []byte("charged"), nil
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("DoTx: %v", err)
				return
			}
			got[res.Outcome]++
			if res.Outcome == idem.OutcomeProcessed {
				commits++
			} else if string(res.Value) != "charged" {
				t.Errorf("duplicate got result %q", res.Value)
			}
		}()
	}
	close(start)
	wg.Wait()
	if commits != 1 || got[idem.OutcomeDuplicate] != 15 {
		t.Fatalf("DoTx outcomes %v, want 1 processed and 15 duplicates", got)
	}
}

// testMarkZeroTimes: a marker request without its times is invalid data,
// and the transaction commits nothing.
func testMarkZeroTimes[Tx any](t *testing.T, s TxStore[Tx]) {
	k := key("tx-zero")
	req := claimReq(k, "fp", T0)
	req.ExpiresAt = time.Time{}
	if _, err := mark(t, s, req, nil, nil); !errors.Is(err, idem.ErrInvalidData) || !idem.IsPermanent(err) {
		t.Fatalf("Mark with zero ExpiresAt: %v; want ErrInvalidData", err)
	}
	if _, err := s.Get(context.Background(), k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("after the rejected marker: %v", err)
	}
}

// testMarkTokenAcrossDeletion: a marker swept and written again gets a
// token no earlier lifetime had.
func testMarkTokenAcrossDeletion[Tx any](t *testing.T, s TxStore[Tx]) {
	k := key("tx-reborn")
	seen := map[int64]bool{}
	at := T0
	for life := range 6 {
		c, err := mark(t, s, claimReq(k, "fp", at), nil, nil)
		if err != nil || c.Outcome != idem.ClaimAcquired {
			t.Fatalf("lifetime %d: Mark = %v, %v", life, c.Outcome, err)
		}
		if got := mustGet(t, s, k); seen[got.Token] {
			t.Fatalf("lifetime %d reuses token %d", life, got.Token)
		} else {
			seen[got.Token] = true
		}
		at = at.Add(retention + time.Second)
		if n, err := s.Sweep(context.Background(), idem.SweepRequest{Now: at, Limit: 10}); err != nil || n != 1 {
			t.Fatalf("lifetime %d: Sweep = %d, %v", life, n, err)
		}
	}
}

// testMarkFingerprintSticksAfterRelease: a two-phase claim released after a
// failure keeps its content; a marker for other content under the key is a
// conflict, and its transaction commits nothing.
func testMarkFingerprintSticksAfterRelease[Tx any](t *testing.T, s TxStore[Tx]) {
	ctx := context.Background()
	var txRuns atomic.Int32
	obs := idem.ObserverFunc(func(_ context.Context, e idem.Event) { txRuns.Store(int32(e.TxRuns)) })
	g := newGuard(t, s, idem.Options{Clock: func() time.Time { return T0 }, Observer: obs})
	a := idem.Message{ID: "tx-sticky", Payload: []byte("A")}
	_, err := g.Do(ctx, a, func(context.Context) ([]byte, error) { return nil, errors.New("transient") })
	if err == nil {
		t.Fatal("failing handler reported no error")
	}
	ran := false
	b := idem.Message{ID: "tx-sticky", Payload: []byte("B")}
	res, err := idem.DoTx(ctx, g, b, func(ctx context.Context, tx Tx) ([]byte, error) {
		ran = true
		return nil, nil
	})
	// A store that defers the marker to the handler's first statement
	// (MarkDeferrer) starts the handler before it knows; then the
	// transaction runs again, and nothing of the first run commits.
	if !errors.Is(err, idem.ErrConflict) || (ran && txRuns.Load() < 2) {
		t.Fatalf("DoTx with other content over a released claim: %v, %v (handler ran: %v in %d runs); want conflict", res.Outcome, err, ran, txRuns.Load())
	}
	if r := mustGet(t, s, res.Key); r.State != idem.StateReleased {
		t.Fatalf("the conflicting marker committed: %+v", r)
	}
	res, err = idem.DoTx(ctx, g, a, func(ctx context.Context, tx Tx) ([]byte, error) { return nil, nil })
	if err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("A's redelivery: %v, %v", res.Outcome, err)
	}
}

// testDoTxRawFingerprint: raw digest bytes as fingerprints work in the
// inbox too.
func testDoTxRawFingerprint[Tx any](t *testing.T, s TxStore[Tx]) {
	raw := func(m idem.Message) (string, error) {
		sum := sha256.Sum256(m.Payload)
		return string(sum[:]), nil
	}
	g := newGuard(t, s, idem.Options{Fingerprint: raw})
	run := func(p string) (idem.Result, error) {
		return idem.DoTx(context.Background(), g, idem.Message{ID: "tx-raw", Payload: []byte(p)}, func(ctx context.Context, tx Tx) ([]byte, error) {
			return nil, nil
		})
	}
	if res, err := run("one"); err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("first: %v, %v", res.Outcome, err)
	}
	if res, err := run("one"); err != nil || res.Outcome != idem.OutcomeDuplicate {
		t.Fatalf("same content: %v, %v", res.Outcome, err)
	}
	if _, err := run("two"); !errors.Is(err, idem.ErrConflict) {
		t.Fatalf("other content: %v; want conflict", err)
	}
}
