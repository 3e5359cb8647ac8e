package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// The rule "the parts of a live run live as long as the run": a completed
// record can be kept past the retention it was completed with
// (idem.Retainer), later and never earlier, by the claim that completed it
// only. Package job retains a run's finished steps on every renewal of the
// run, so a run that lives longer than its retention and then crashes is
// resumed after its last finished step instead of doing the steps again.

// retainTests are run by Run.
var retainTests = []struct {
	name string
	fn   func(t *testing.T, s idem.Store)
}{
	{"RetainKeepsCompleted", testRetainKeepsCompleted},
	{"RetainOnlyOwnCompleted", testRetainOnlyOwnCompleted},
}

// retainer returns s as an idem.Retainer, or skips: the capability is
// optional for stores outside this module (package job's steps need it).
func retainer(t *testing.T, s idem.Store) idem.Retainer {
	t.Helper()
	rs, ok := s.(idem.Retainer)
	if !ok {
		t.Skipf("%T is not an idem.Retainer (package job's steps need it to outlive their retention)", s)
	}
	return rs
}

func retainReq(k idem.Key, token int64, now, until time.Time) idem.RetainRequest {
	return idem.RetainRequest{Key: k, Token: token, Now: now, ExpiresAt: until}
}

// A retained record is a duplicate, and survives sweeps, until its new
// expiry; a retain to an earlier time changes nothing; at the new expiry the
// record expires as any other.
func testRetainKeepsCompleted(t *testing.T, s idem.Store) {
	rs := retainer(t, s)
	ctx := context.Background()
	k := key("step-a")
	c := mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
	done := T0.Add(time.Second)
	mustComplete(t, s, k, c.Record.Token, []byte("a-done"), done) // expires at done + retention
	until := T0.Add(3 * retention)
	if err := rs.Retain(ctx, retainReq(k, c.Record.Token, T0.Add(time.Hour), until)); err != nil {
		t.Fatalf("Retain of a completed record under its token: %v", err)
	}
	r := mustGet(t, s, k)
	if r.State != idem.StateCompleted || r.Token != c.Record.Token || string(r.Result) != "a-done" ||
		r.Fingerprint != "fp" || !sameTime(r.ExpiresAt, until) {
		t.Fatalf("after Retain: %+v, want the completed record with ExpiresAt %v", r, until)
	}
	if err := rs.Retain(ctx, retainReq(k, c.Record.Token, T0.Add(2*time.Hour), T0.Add(2*time.Hour+retention))); err != nil {
		t.Fatalf("Retain to an earlier time: %v", err)
	}
	if r := mustGet(t, s, k); !sameTime(r.ExpiresAt, until) {
		t.Fatalf("a Retain to an earlier time moved ExpiresAt to %v (want %v kept)", r.ExpiresAt, until)
	}

	// Past the retention it was completed with: still a duplicate, and
	// sweeps leave it.
	past := done.Add(2 * retention)
	mustClaim(t, s, claimReq(k, "fp", past), idem.ClaimDuplicate)
	if _, err := s.Sweep(ctx, idem.SweepRequest{Now: past, Limit: 100}); err != nil {
		t.Fatal(err)
	}
	if r := mustGet(t, s, k); r.State != idem.StateCompleted || r.Token != c.Record.Token {
		t.Fatalf("a sweep before the retained expiry took the record: %+v", r)
	}
	// At the new expiry it expires: the next claim starts a new lifetime.
	again := mustClaim(t, s, claimReq(k, "fp2", until), idem.ClaimAcquired)
	if again.Record.Token == c.Record.Token || again.Record.Fingerprint != "fp2" {
		t.Fatalf("claim at the retained expiry: %+v, want a new lifetime", again.Record)
	}
}

// Only the claim that completed a record retains it: another token, a
// record in progress or released (even under the caller's token), one that
// expired, or none at all is refused, and nothing changes.
func testRetainOnlyOwnCompleted(t *testing.T, s idem.Store) {
	rs := retainer(t, s)
	ctx := context.Background()
	far := T0.Add(10 * retention)
	if err := rs.Retain(ctx, retainReq(key("absent"), 1<<40, T0, far)); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("Retain of an absent key: %v, want ErrNotFound", err)
	}

	held := key("held")
	c := mustClaim(t, s, claimReq(held, "fp", T0), idem.ClaimAcquired)
	if err := rs.Retain(ctx, retainReq(held, c.Record.Token, T0, far)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Retain of an in-progress record under its token: %v, want ErrLeaseLost", err)
	}
	if r := mustGet(t, s, held); r.State != idem.StateInProgress || !sameTime(r.ExpiresAt, T0.Add(retention)) {
		t.Errorf("a refused Retain changed the in-progress record: %+v", r)
	}

	rel := key("released")
	c = mustClaim(t, s, claimReq(rel, "fp", T0), idem.ClaimAcquired)
	if err := s.Release(ctx, idem.ReleaseRequest{Key: rel, Token: c.Record.Token, Now: T0}); err != nil {
		t.Fatal(err)
	}
	if err := rs.Retain(ctx, retainReq(rel, c.Record.Token, T0, far)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Retain of a released record under its token: %v, want ErrLeaseLost", err)
	}

	done := key("done")
	c = mustClaim(t, s, claimReq(done, "fp", T0), idem.ClaimAcquired)
	mustComplete(t, s, done, c.Record.Token, nil, T0)
	if err := rs.Retain(ctx, retainReq(done, c.Record.Token+1, T0, far)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Retain under another token: %v, want ErrLeaseLost", err)
	}
	if r := mustGet(t, s, done); !sameTime(r.ExpiresAt, T0.Add(retention)) {
		t.Errorf("a Retain under another token moved ExpiresAt to %v", r.ExpiresAt)
	}
	// Expired (not swept yet): a retention that ended is over.
	end := T0.Add(retention)
	if err := rs.Retain(ctx, retainReq(done, c.Record.Token, end, far)); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("Retain of an expired record: %v, want ErrNotFound", err)
	}
	next := mustClaim(t, s, claimReq(done, "fp", end), idem.ClaimAcquired)
	mustComplete(t, s, done, next.Record.Token, nil, end)
	if err := rs.Retain(ctx, retainReq(done, c.Record.Token, end, far)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Retain by the earlier lifetime's token: %v, want ErrLeaseLost", err)
	}
	if err := rs.Retain(ctx, retainReq(done, next.Record.Token, end, far)); err != nil {
		t.Errorf("Retain by the new lifetime's token: %v", err)
	}

	for name, req := range map[string]idem.RetainRequest{
		"zero Now":       retainReq(done, next.Record.Token, time.Time{}, far),
		"zero ExpiresAt": retainReq(done, next.Record.Token, end, time.Time{}),
	} {
		if err := rs.Retain(ctx, req); !errors.Is(err, idem.ErrInvalidData) {
			t.Errorf("Retain with %s: %v, want ErrInvalidData", name, err)
		}
	}
}
