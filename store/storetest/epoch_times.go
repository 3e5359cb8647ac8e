package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// The rule "times are times": no real time doubles as "unset". A lease
// that ends exactly at the Unix epoch, a retention that ends before it, a
// record created at it are stored, compared and read back as those times:
// a store that keeps Unix milliseconds and reads 0 as "no lease" lets a
// claim 1 ms before the epoch take over a live owner, and one that counts
// only expires_at > 0 never sweeps a record whose retention ended in 1969.

// epochTests are run by Run.
var epochTests = []struct {
	name string
	fn   func(t *testing.T, s idem.Store)
}{
	{"TimesAtAndBeforeEpoch", testEpochTimes},
}

// epoch is 1970-01-01T00:00:00Z, Unix time 0.
var epoch = time.Unix(0, 0).UTC()

// epochPivots are the instants each case of testEpochTimes puts a lease
// end, a retention end and a creation time at, oldest first.
var epochPivots = []struct {
	scope string
	at    time.Time
}{
	{"moon-1969", time.Date(1969, 7, 20, 20, 17, 40, 0, time.UTC)},
	{"epoch-minus-1ms", epoch.Add(-time.Millisecond)},
	{"epoch", epoch},
}

func testEpochTimes(t *testing.T, s idem.Store) {
	for _, p := range epochPivots {
		t.Run(p.scope, func(t *testing.T) { testTimesAt(t, s, p.scope, p.at) })
	}
}

// testTimesAt puts every kind of stored time exactly at p, in scope (empty
// before the call; the store may hold records of earlier, older pivots).
func testTimesAt(t *testing.T, s idem.Store, scope string, p time.Time) {
	ctx := context.Background()
	k := func(id string) idem.Key { return idem.Key{Scope: scope, ID: id} }
	at := func(now time.Time, leaseFor, retention time.Duration) idem.ClaimRequest {
		return idem.ClaimRequest{Key: k(""), Fingerprint: "fp", Now: now, LeaseUntil: now.Add(leaseFor),
			ExpiresAt: now.Add(retention), TakeOverStale: true}
	}
	claim := func(id string, req idem.ClaimRequest, want idem.ClaimOutcome) idem.Claim {
		t.Helper()
		req.Key = k(id)
		return mustClaim(t, s, req, want)
	}
	checkTime := func(what string, got time.Time) {
		t.Helper()
		if got.IsZero() || !sameTime(got, p) {
			t.Fatalf("%s = %v, want %v (a real time, not unset)", what, got, p)
		}
	}

	// A lease that ends at p: live 1 ms before, stale at p.
	held := claim("lease", at(p.Add(-10*time.Second), 10*time.Second, time.Hour), idem.ClaimAcquired)
	checkTime("LeaseUntil of a claim", mustGet(t, s, k("lease")).LeaseUntil)
	if c := claim("lease", at(p.Add(-time.Millisecond), lease, time.Hour), idem.ClaimInProgress); c.Record.Token != held.Record.Token {
		t.Fatalf("in-progress claim changed the token: %+v", c.Record)
	}
	if c := claim("lease", at(p, lease, time.Hour), idem.ClaimAcquired); !c.Retaken || c.Record.Token != held.Record.Token+1 {
		t.Fatalf("claim at the lease end = %+v retaken=%v; want a retake", c.Record, c.Retaken)
	}

	// A renewal to p, and a record created at p.
	renew := claim("renew", at(p.Add(-20*time.Second), 10*time.Second, time.Hour), idem.ClaimAcquired)
	if err := s.Renew(ctx, idem.RenewRequest{Key: k("renew"), Token: renew.Record.Token, Now: p.Add(-15 * time.Second), LeaseUntil: p}); err != nil {
		t.Fatalf("Renew to %v: %v", p, err)
	}
	checkTime("LeaseUntil of a renewal", mustGet(t, s, k("renew")).LeaseUntil)
	claim("renew", at(p.Add(-time.Millisecond), lease, time.Hour), idem.ClaimInProgress)
	claim("created", at(p, lease, time.Hour), idem.ClaimAcquired)
	created := mustGet(t, s, k("created"))
	checkTime("CreatedAt", created.CreatedAt)
	checkTime("UpdatedAt", created.UpdatedAt)

	// A retention that ends at p: a duplicate 1 ms before, expired at p
	// (counted, swept, and claimed as a new lifetime).
	done := claim("done", at(p.Add(-20*time.Second), 5*time.Second, time.Hour), idem.ClaimAcquired)
	if err := s.Complete(ctx, idem.CompleteRequest{Key: k("done"), Token: done.Record.Token, Result: []byte("r"), Now: p.Add(-10 * time.Second), ExpiresAt: p}); err != nil {
		t.Fatalf("Complete with ExpiresAt %v: %v", p, err)
	}
	checkTime("ExpiresAt of a completion", mustGet(t, s, k("done")).ExpiresAt)
	claim("done", at(p.Add(-time.Millisecond), lease, time.Hour), idem.ClaimDuplicate)
	expiredIn := func(now time.Time) int64 {
		t.Helper()
		in, ok := s.(idem.Inspector)
		if !ok {
			return -1
		}
		stats, err := in.Stats(ctx, now)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		for _, st := range stats {
			if st.Scope == scope {
				return st.Expired
			}
		}
		t.Fatalf("Stats at %v: no scope %s in %+v", now, scope, stats)
		return 0
	}
	if n := expiredIn(p.Add(-time.Millisecond)); n > 0 {
		t.Fatalf("Stats 1 ms before the retention end: %d expired, want 0", n)
	}
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: p.Add(-time.Millisecond), Limit: 100}); err != nil || n != 0 {
		t.Fatalf("Sweep 1 ms before the retention end = %d, %v; want 0", n, err)
	}
	if n := expiredIn(p); n == 0 {
		t.Fatal("Stats at the retention end: none expired, want the completed record")
	}
	swept := 0
	for range 5 {
		n, err := s.Sweep(ctx, idem.SweepRequest{Now: p, Limit: 100})
		if err != nil {
			t.Fatalf("Sweep at the retention end: %v", err)
		}
		swept += n
		if n == 0 {
			break
		}
	}
	if _, err := s.Get(ctx, k("done")); swept != 1 || !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Sweep at the retention end deleted %d records (Get after: %v); want the completed one", swept, err)
	}
	// The records in progress stay, with their times.
	checkTime("LeaseUntil after the sweep", mustGet(t, s, k("renew")).LeaseUntil)
}

// testMarkTimesAtEpoch: a transactional marker whose retention ends exactly
// at the epoch is a duplicate 1 ms before it and expired (a new marker) at
// it.
func testMarkTimesAtEpoch[Tx any](t *testing.T, s TxStore[Tx]) {
	k := key("tx-epoch")
	req := func(now time.Time) idem.ClaimRequest {
		r := claimReq(k, "fp", now)
		r.LeaseUntil, r.ExpiresAt = now.Add(time.Second), epoch
		return r
	}
	first, err := mark(t, s, req(epoch.Add(-time.Minute)), []byte("r"), nil)
	if err != nil || first.Outcome != idem.ClaimAcquired {
		t.Fatalf("Mark = %v, %v", first.Outcome, err)
	}
	if r := mustGet(t, s, k); !sameTime(r.ExpiresAt, epoch) || r.ExpiresAt.IsZero() {
		t.Fatalf("marker ExpiresAt = %v, want the epoch", r.ExpiresAt)
	}
	if c, err := mark(t, s, claimReq(k, "fp", epoch.Add(-time.Millisecond)), nil, nil); err != nil || c.Outcome != idem.ClaimDuplicate {
		t.Fatalf("Mark 1 ms before the epoch = %v, %v; want duplicate", c.Outcome, err)
	}
	if c, err := mark(t, s, claimReq(k, "fp", epoch), nil, nil); err != nil || c.Outcome != idem.ClaimAcquired {
		t.Fatalf("Mark at the epoch = %v, %v; want acquired (the marker expired)", c.Outcome, err)
	}
}
