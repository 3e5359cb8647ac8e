package storekit_test

import (
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

func TestStoredFingerprint(t *testing.T) {
	sum := sha256.Sum256([]byte("p"))
	for _, fp := range []string{string(sum[:]), "a\x00b", "\xff", strings.Repeat("f", idem.MaxFingerprintLen+1)} {
		got := storekit.StoredFingerprint(fp)
		if !strings.HasPrefix(got, "sha256:") || storekit.StoredFingerprint(got) != got {
			t.Fatalf("StoredFingerprint(%q) = %q", fp, got)
		}
	}
	for _, fp := range []string{"", "abc", strings.Repeat("f", idem.MaxFingerprintLen)} {
		if got := storekit.StoredFingerprint(fp); got != fp {
			t.Fatalf("StoredFingerprint(%q) = %q, want it unchanged", fp, got)
		}
	}
	if storekit.StoredFingerprint(string(sum[:])) == storekit.StoredFingerprint("other") {
		t.Fatal("different fingerprints collide")
	}
}

func TestPrepare(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	k := idem.Key{Scope: "s", ID: "1"}
	req := idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Second)}
	p, err := storekit.PrepareClaim(req)
	if err != nil {
		t.Fatal(err)
	}
	if !p.ExpiresAt.Equal(p.LeaseUntil) {
		t.Fatalf("ExpiresAt %v not raised to the lease end %v", p.ExpiresAt, p.LeaseUntil)
	}
	if p.NewToken < 1<<32 || p.NewToken >= 1<<52 {
		t.Fatalf("NewToken %d outside [2^32, 2^52)", p.NewToken)
	}
	req.ExpiresAt = time.Time{}
	if _, err := storekit.PrepareClaim(req); !errors.Is(err, idem.ErrInvalidData) || !idem.IsPermanent(err) ||
		idem.DeadLetterReason(err) != "invalid_data" {
		t.Fatalf("zero ExpiresAt: %v", err)
	}
	var ide *idem.InvalidDataError
	if _, err := storekit.PrepareComplete(idem.CompleteRequest{Key: k, Now: now}); !errors.As(err, &ide) {
		t.Fatalf("Complete with zero ExpiresAt: %v", err)
	}
	seen := map[int64]bool{}
	for range 10000 {
		tok := storekit.NewToken()
		if seen[tok] {
			t.Fatalf("NewToken repeated %d", tok)
		}
		seen[tok] = true
	}
}

// The claim transition on each kind of current record (the Store
// contract's table; storetest holds every store to the same).
func TestApplyClaim(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	k := idem.Key{Scope: "s", ID: "1"}
	req, err := storekit.PrepareClaim(idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(st idem.State, lease, expires time.Time) *idem.Record {
		return &idem.Record{Scope: "s", ID: "1", State: st, Token: 7, Attempts: 1, LeaseUntil: lease, ExpiresAt: expires, Fingerprint: "f"}
	}
	for _, c := range []struct {
		name    string
		cur     *idem.Record
		stale   bool
		outcome idem.ClaimOutcome
		write   bool
		token   int64
	}{
		{"absent", nil, false, idem.ClaimAcquired, true, req.NewToken},
		{"completed", rec(idem.StateCompleted, now, now.Add(time.Hour)), false, idem.ClaimDuplicate, false, 7},
		{"completed and expired", rec(idem.StateCompleted, now, now.Add(-time.Second)), false, idem.ClaimAcquired, true, 8},
		{"released", rec(idem.StateReleased, now, now.Add(time.Hour)), false, idem.ClaimAcquired, true, 8},
		{"held", rec(idem.StateInProgress, now.Add(time.Second), now.Add(time.Hour)), true, idem.ClaimInProgress, false, 7},
		{"stale, not taken over", rec(idem.StateInProgress, now.Add(-time.Second), now.Add(-time.Hour)), false, idem.ClaimStale, false, 7},
		{"stale, taken over", rec(idem.StateInProgress, now.Add(-time.Second), now.Add(-time.Hour)), true, idem.ClaimAcquired, true, 8},
	} {
		r := req
		r.TakeOverStale = c.stale
		claim, write := storekit.ApplyClaim(c.cur, r)
		if claim.Outcome != c.outcome || write != c.write || claim.Record.Token != c.token {
			t.Errorf("%s: outcome %v write %v token %d, want %v %v %d", c.name, claim.Outcome, write, claim.Record.Token, c.outcome, c.write, c.token)
		}
		if mark, _ := storekit.ApplyMark(c.cur, r); c.outcome == idem.ClaimAcquired && c.name != "stale, taken over" && mark.Record.State != idem.StateCompleted {
			t.Errorf("%s: a marker is written completed, got %v", c.name, mark.Record.State)
		}
	}
}

func TestCheckBatchKeys(t *testing.T) {
	k := idem.Key{Scope: "s", ID: "1"}
	err := storekit.CheckBatchKeys("claim batch", []idem.ClaimRequest{{Key: k}, {Key: idem.Key{Scope: "s", ID: "2"}}, {Key: k}})
	if !errors.Is(err, idem.ErrDuplicateKeyInBatch) || !idem.IsPermanent(err) {
		t.Fatalf("a repeated key: %v", err)
	}
	if err := storekit.CheckBatchKeys("claim batch", []idem.ClaimRequest{{Key: k}}); err != nil {
		t.Fatal(err)
	}
}

func TestAddStatsAndTally(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var st idem.ScopeStats
	storekit.AddStats(&st, idem.Record{State: idem.StateInProgress, LeaseUntil: now.Add(-time.Second), CreatedAt: now.Add(-time.Hour)}, now)
	storekit.AddStats(&st, idem.Record{State: idem.StateCompleted, ExpiresAt: now.Add(-time.Second)}, now)
	if st.InProgress != 1 || st.Stale != 1 || st.Completed != 1 || st.Expired != 1 || !st.OldestInProgress.Equal(now.Add(-time.Hour)) {
		t.Fatalf("stats %+v", st)
	}
	q, err := storekit.PrepareActivity(idem.ActivityQuery{From: now, Step: time.Minute, Buckets: 2})
	if err != nil {
		t.Fatal(err)
	}
	tally := storekit.NewActivityTally(q)
	tally.Record(idem.Record{Scope: "s", State: idem.StateCompleted, Attempts: 2, CreatedAt: now, UpdatedAt: now.Add(90 * time.Second)})
	got := tally.Result()
	if len(got) != 1 || got[0].Buckets[0].Claimed != 1 || got[0].Buckets[1].Completed != 1 || got[0].Buckets[1].Retried != 1 {
		t.Fatalf("tally %+v", got)
	}
	if _, err := storekit.PrepareActivity(idem.ActivityQuery{From: now, Step: time.Millisecond, Buckets: 2}); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Fatalf("a step under a second: %v", err)
	}
}
