package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// The rule "only settled records expire": a completed or released record
// expires by its retention; an in-progress record whose lease ended is stale,
// however long ago and whatever its ExpiresAt. A claim reports it to the
// Stale policy (ClaimStale, or a retake with Retaken and the token plus one),
// never as a fresh lifetime; a sweep leaves it; Stats counts it Stale, not
// Expired. A run that crashed after living longer than its retention is what
// an operator must see, and what a retake must continue (the job package's
// finished steps are not redone).

// lifetimeStaleTests are run by Run.
var lifetimeStaleTests = []struct {
	name string
	fn   func(t *testing.T, s idem.Store)
}{
	{"StalePastRetentionIsStale", testStalePastRetention},
	{"StalePastRetentionBatch", testStalePastRetentionBatch},
	{"StalePastRetentionNotSwept", testStalePastRetentionNotSwept},
	{"GuardStaleParkPastRetention", testGuardStaleParkPastRetention},
}

// crashedPastRetention claims k at T0 with a lease of 10 s and a retention of
// one minute and returns the claim; the owner then crashes (no complete, no
// release). At staleAt both the lease and the ExpiresAt have passed.
func crashedPastRetention(t *testing.T, s idem.Store, k idem.Key) idem.Claim {
	t.Helper()
	req := claimReq(k, "fp", T0)
	req.ExpiresAt = T0.Add(time.Minute)
	return mustClaim(t, s, req, idem.ClaimAcquired)
}

// staleAt is long after the lease and the retention of crashedPastRetention.
var staleAt = T0.Add(2 * time.Hour)

// checkStillCrashed fails unless r is first's record as the crash left it.
func checkStillCrashed(t *testing.T, what string, r idem.Record, first idem.Claim) {
	t.Helper()
	if r.State != idem.StateInProgress || r.Token != first.Record.Token || r.Attempts != 1 ||
		r.Fingerprint != "fp" || !sameTime(r.LeaseUntil, T0.Add(lease)) {
		t.Fatalf("%s: record %+v; want the crashed claim unchanged (in progress, token %d, attempts 1, fingerprint fp)",
			what, r, first.Record.Token)
	}
}

// checkRetaken fails unless c retook first's record at staleAt: Retaken,
// token plus one, attempts 2, the first fingerprint and creation time kept.
func checkRetaken(t *testing.T, c idem.Claim, first idem.Claim) {
	t.Helper()
	r := c.Record
	if c.Outcome != idem.ClaimAcquired || !c.Retaken || r.Token != first.Record.Token+1 || r.Attempts != 2 ||
		r.Fingerprint != "fp" || r.State != idem.StateInProgress || !sameTime(r.CreatedAt, T0) ||
		!sameTime(r.LeaseUntil, staleAt.Add(lease)) {
		t.Fatalf("claim of a stale record past its retention = %v retaken=%v %+v; want a retake (token %d, attempts 2, fingerprint fp, created %v), not a fresh lifetime",
			c.Outcome, c.Retaken, r, first.Record.Token+1, T0)
	}
}

func testStalePastRetention(t *testing.T, s idem.Store) {
	ctx := context.Background()
	k := key("crashed-long-ago")
	first := crashedPastRetention(t, s, k)

	park := claimReq(k, "other", staleAt)
	park.TakeOverStale = false
	c := mustClaim(t, s, park, idem.ClaimStale)
	checkStillCrashed(t, "ClaimStale", c.Record, first)
	checkStillCrashed(t, "Get after ClaimStale", mustGet(t, s, k), first)

	c = mustClaim(t, s, claimReq(k, "other", staleAt), idem.ClaimAcquired)
	checkRetaken(t, c, first)
	if got := mustGet(t, s, k); got.Token != c.Record.Token || got.Attempts != 2 {
		t.Fatalf("Get after the retake = %+v", got)
	}
	// The crashed owner is fenced off; the new one completes.
	err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: first.Record.Token, Now: staleAt, ExpiresAt: staleAt.Add(retention)})
	if !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Complete by the crashed owner after the retake = %v, want ErrLeaseLost", err)
	}
	mustComplete(t, s, k, c.Record.Token, []byte("done"), staleAt)
}

func testStalePastRetentionBatch(t *testing.T, s idem.Store) {
	ctx := context.Background()
	k := key("crashed-batch")
	fresh := key("fresh-batch")
	first := crashedPastRetention(t, s, k)

	park := []idem.ClaimRequest{claimReq(k, "other", staleAt), claimReq(fresh, "fp", staleAt)}
	for i := range park {
		park[i].TakeOverStale = false
	}
	claims, err := idem.ClaimBatch(ctx, s, park)
	if err != nil {
		t.Fatalf("ClaimBatch: %v", err)
	}
	if claims[0].Outcome != idem.ClaimStale || claims[1].Outcome != idem.ClaimAcquired {
		t.Fatalf("batch outcomes %v, %v; want stale (the crashed claim) and acquired", claims[0].Outcome, claims[1].Outcome)
	}
	checkStillCrashed(t, "batch ClaimStale", claims[0].Record, first)
	checkStillCrashed(t, "Get after the batch", mustGet(t, s, k), first)

	claims, err = idem.ClaimBatch(ctx, s, []idem.ClaimRequest{claimReq(k, "other", staleAt)})
	if err != nil {
		t.Fatalf("ClaimBatch with TakeOverStale: %v", err)
	}
	checkRetaken(t, claims[0], first)
}

func testStalePastRetentionNotSwept(t *testing.T, s idem.Store) {
	ctx := context.Background()
	k := key("crashed-unswept")
	first := crashedPastRetention(t, s, k)
	// A settled record with the same retention: it does expire.
	done := key("done-swept")
	dc := mustClaim(t, s, claimReq(done, "fp", T0), idem.ClaimAcquired)
	if err := s.Complete(ctx, idem.CompleteRequest{Key: done, Token: dc.Record.Token, Now: T0, ExpiresAt: T0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}

	if in, ok := s.(idem.Inspector); ok {
		stats, err := in.Stats(ctx, staleAt)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		if len(stats) != 1 {
			t.Fatalf("Stats = %+v, want one scope", stats)
		}
		st := stats[0]
		if st.InProgress != 1 || st.Stale != 1 || st.Completed != 1 || st.Expired != 1 {
			t.Fatalf("Stats past the retention = %+v; want in progress 1, stale 1, completed 1, expired 1 (the completed one only)", st)
		}
	}
	total := 0
	for range 5 {
		n, err := s.Sweep(ctx, idem.SweepRequest{Now: staleAt, Limit: 100})
		if err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		total += n
		if n == 0 {
			break
		}
	}
	if total != 1 {
		t.Fatalf("Sweep deleted %d records; want 1 (the completed one, never the stale one)", total)
	}
	if _, err := s.Get(ctx, done); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("completed record after the sweep: %v, want ErrNotFound", err)
	}
	checkStillCrashed(t, "Get after the sweep", mustGet(t, s, k), first)
	park := claimReq(k, "fp", staleAt)
	park.TakeOverStale = false
	mustClaim(t, s, park, idem.ClaimStale)
}

// testGuardStaleParkPastRetention: a guard with StalePark parks a message
// whose earlier run crashed longer ago than the retention: ErrStale, the
// handler never runs, the record stays for the operator. With StaleRetake
// the handler runs, reported Retaken.
func testGuardStaleParkPastRetention(t *testing.T, s idem.Store) {
	ctx := context.Background()
	clock := T0
	opts := idem.Options{Lease: time.Second, Retention: time.Minute, Stale: idem.StalePark, Clock: func() time.Time { return clock }}
	g := newGuard(t, s, opts)
	msg := idem.Message{ID: "run-crashed", Payload: []byte("x")}
	k, _ := g.Key(msg)
	fp, _ := g.Fingerprint(msg)
	crash := claimReq(k, fp, T0)
	crash.LeaseUntil, crash.ExpiresAt = T0.Add(time.Second), T0.Add(time.Minute)
	first := mustClaim(t, s, crash, idem.ClaimAcquired)

	clock = T0.Add(time.Hour) // past the lease and the retention
	res, err := g.Do(ctx, msg, func(context.Context) ([]byte, error) {
		t.Fatal("StalePark ran the handler over a crashed run past its retention")
		return nil, nil
	})
	if !errors.Is(err, idem.ErrStale) || res.Outcome != idem.OutcomeStale {
		t.Fatalf("StalePark past the retention: %v, %v; want OutcomeStale, ErrStale", res.Outcome, err)
	}
	if r := mustGet(t, s, k); r.State != idem.StateInProgress || r.Token != first.Record.Token || r.Attempts != 1 {
		t.Fatalf("StalePark changed the record: %+v", r)
	}

	opts.Stale = idem.StaleRetake
	retake := newGuard(t, s, opts)
	ran := 0
	res, err = retake.Do(ctx, msg, func(context.Context) ([]byte, error) { ran++; return []byte("ok"), nil })
	if err != nil || res.Outcome != idem.OutcomeProcessed || !res.Retaken || ran != 1 {
		t.Fatalf("StaleRetake past the retention: %v retaken=%v ran %d, %v; want processed, retaken, once", res.Outcome, res.Retaken, ran, err)
	}
	if r := mustGet(t, s, k); r.State != idem.StateCompleted || r.Token != first.Record.Token+1 || r.Attempts != 2 {
		t.Fatalf("after the retake: %+v; want completed with token %d, attempts 2", r, first.Record.Token+1)
	}
}

// testMarkStalePastRetention: a transactional marker over a two-phase claim
// that crashed longer ago than its retention is ClaimStale (never taken over
// in a transaction, never a fresh marker over it).
func testMarkStalePastRetention[Tx any](t *testing.T, s TxStore[Tx]) {
	k := key("tx-crashed-long-ago")
	first := crashedPastRetention(t, s, k)
	c, err := mark(t, s, claimReq(k, "fp", staleAt), nil, nil)
	if err != nil || c.Outcome != idem.ClaimStale {
		t.Fatalf("Mark over a stale claim past its retention = %v, %v; want ClaimStale", c.Outcome, err)
	}
	checkStillCrashed(t, "Get after Mark", mustGet(t, s, k), first)
}
