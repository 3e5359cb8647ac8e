package mysql_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
)

func sameRecord(a, b idem.Record) bool {
	return a.Scope == b.Scope && a.ID == b.ID && a.DisplayID == b.DisplayID && a.State == b.State &&
		a.Fingerprint == b.Fingerprint && bytes.Equal(a.Result, b.Result) && a.Token == b.Token &&
		a.Attempts == b.Attempts && a.LeaseUntil.Equal(b.LeaseUntil) && a.ExpiresAt.Equal(b.ExpiresAt) &&
		a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt)
}

// TestBatchMatchesMemory: a batch over records in every state (absent,
// completed, released, expired, live, stale with and without takeover, in
// two scopes) gives the claims and leaves the records that one-by-one claims
// on the reference memory store do. Records a batch does not take must come
// back exactly as they were.
func TestBatchMatchesMemory(t *testing.T) {
	ctx := context.Background()
	my := newStore(t, openDB(t, true, false))
	ref := memory.New()
	both := func(fn func(s idem.Store) error) {
		t.Helper()
		for _, s := range []idem.Store{ref, my} {
			if err := fn(s); err != nil {
				t.Fatalf("%T: %v", s, err)
			}
		}
	}
	k := func(scope, id string) idem.Key { return idem.Key{Scope: scope, ID: id} }
	long := string(bytes.Repeat([]byte("z"), 400))
	setup := []struct {
		key  idem.Key
		then string // what happens after the first claim at t0
	}{
		{k("a", "completed"), "complete"},
		{k("a", "released"), "release"},
		{k("a", "expired"), "complete-short"},
		{k("a", "live"), ""},
		{k("b", "stale"), ""},
		{k("b", "parked"), ""},
		{k("b", long), "complete"},
	}
	// Both stores draw no tokens of their own: each request names the
	// token a record it creates takes.
	tokens := int64(1 << 40)
	withToken := func(r idem.ClaimRequest) idem.ClaimRequest {
		tokens += 1000
		r.NewToken = tokens
		return r
	}
	for _, st := range setup {
		first := withToken(req(st.key, t0))
		both(func(s idem.Store) error {
			c, err := s.Claim(ctx, first)
			if err != nil {
				return err
			}
			switch st.then {
			case "complete":
				return s.Complete(ctx, idem.CompleteRequest{Key: st.key, Token: c.Record.Token, Result: []byte("r-" + st.key.ID[:3]), Now: t0, ExpiresAt: t0.Add(24 * time.Hour)})
			case "complete-short":
				return s.Complete(ctx, idem.CompleteRequest{Key: st.key, Token: c.Record.Token, Result: []byte("old"), Now: t0, ExpiresAt: t0.Add(time.Second)})
			case "release":
				return s.Release(ctx, idem.ReleaseRequest{Key: st.key, Token: c.Record.Token, Now: t0})
			}
			return nil
		})
	}
	// "live" is renewed so that only "stale" and "parked" have ended leases.
	both(func(s idem.Store) error {
		r, err := s.Get(ctx, k("a", "live"))
		if err != nil {
			return err
		}
		return s.Renew(ctx, idem.RenewRequest{Key: r.Key(), Token: r.Token, Now: t0, LeaseUntil: t0.Add(time.Hour)})
	})
	now := t0.Add(time.Minute)
	var reqs []idem.ClaimRequest
	for _, st := range setup {
		r := withToken(req(st.key, now))
		r.Fingerprint = "fp2"
		r.TakeOverStale = st.key.ID != "parked"
		reqs = append(reqs, r)
	}
	for i := range 3 {
		reqs = append(reqs, withToken(req(k("a", fmt.Sprint("new-", i)), now)))
	}
	want := make([]idem.Claim, len(reqs))
	for i, r := range reqs {
		c, err := ref.Claim(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = c
	}
	got, err := my.ClaimBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		g, w := got[i], want[i]
		if g.Outcome != w.Outcome || g.Retaken != w.Retaken || !sameRecord(g.Record, w.Record) {
			t.Errorf("%s: batch claim\n  %v %v %+v\nwant\n  %v %v %+v", reqs[i].Key, g.Outcome, g.Retaken, g.Record, w.Outcome, w.Retaken, w.Record)
		}
		stored, err := my.Get(ctx, reqs[i].Key)
		ref, _ := ref.Get(ctx, reqs[i].Key)
		if err != nil || !sameRecord(stored, ref) {
			t.Errorf("%s: stored after the batch\n  %+v (%v)\nwant\n  %+v", reqs[i].Key, stored, err, ref)
		}
	}
}

// TestBatchOverChunk: batches larger than one statement's 1000 keys come back
// complete and in request order.
func TestBatchOverChunk(t *testing.T) {
	s := newStore(t, openDB(t, true, false))
	ctx := context.Background()
	reqs := make([]idem.ClaimRequest, 2345)
	for i := range reqs {
		reqs[i] = req(idem.Key{Scope: "big", ID: fmt.Sprintf("k-%d", len(reqs)-i)}, t0) // descending ids
	}
	for round, want := range []idem.ClaimOutcome{idem.ClaimAcquired, idem.ClaimInProgress} {
		claims, err := s.ClaimBatch(ctx, reqs)
		if err != nil || len(claims) != len(reqs) {
			t.Fatalf("round %d: %d claims, %v", round, len(claims), err)
		}
		for i, c := range claims {
			if c.Outcome != want || c.Record.ID != reqs[i].Key.ID {
				t.Fatalf("round %d: claim %d = %v %q, want %v %q", round, i, c.Outcome, c.Record.ID, want, reqs[i].Key.ID)
			}
		}
	}
}
