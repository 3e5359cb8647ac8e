package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// InspectorStore is a store operators can list and count.
type InspectorStore interface {
	idem.Store
	idem.Inspector
}

// RunInspector checks List (filters and paging) and Stats on a fresh store
// holding records of every state in two scopes.
func RunInspector(t *testing.T, newStore func(t *testing.T) InspectorStore) {
	t.Run("ListAndStats", func(t *testing.T) {
		s := newStore(t)
		ctx := context.Background()
		// billing: 4 completed, 3 in progress (1 of them stale at T0+1m), 2 released.
		// shipping: 5 completed.
		for i := range 4 {
			k := idem.Key{Scope: "billing", ID: fmt.Sprintf("done-%d", i)}
			c := mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
			mustComplete(t, s, k, c.Record.Token, nil, T0)
		}
		for i := range 3 {
			req := claimReq(idem.Key{Scope: "billing", ID: fmt.Sprintf("busy-%d", i)}, "fp", T0.Add(time.Duration(i)*time.Second))
			if i == 0 {
				req.LeaseUntil = T0.Add(30 * time.Second)
			} else {
				req.LeaseUntil = T0.Add(time.Hour)
			}
			mustClaim(t, s, req, idem.ClaimAcquired)
		}
		for i := range 2 {
			k := idem.Key{Scope: "billing", ID: fmt.Sprintf("rel-%d", i)}
			c := mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
			if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: c.Record.Token, Now: T0}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 5 {
			k := idem.Key{Scope: "shipping", ID: fmt.Sprintf("s-%d", i)}
			req := claimReq(k, "fp", T0.Add(time.Minute))
			c := mustClaim(t, s, req, idem.ClaimAcquired)
			if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Now: T0, ExpiresAt: T0.Add(30 * time.Second)}); err != nil {
				t.Fatal(err)
			}
		}
		list := func(f idem.ListFilter) []idem.Record {
			t.Helper()
			recs, err := s.List(ctx, f)
			if err != nil {
				t.Fatalf("List(%+v): %v", f, err)
			}
			return recs
		}
		if n := len(list(idem.ListFilter{Limit: 100})); n != 14 {
			t.Fatalf("List all = %d records, want 14", n)
		}
		if n := len(list(idem.ListFilter{Scope: "billing", Limit: 100})); n != 9 {
			t.Fatalf("List billing = %d, want 9", n)
		}
		if n := len(list(idem.ListFilter{Scope: "billing", State: idem.StateReleased})); n != 2 {
			t.Fatalf("List released = %d, want 2", n)
		}
		stale := list(idem.ListFilter{StaleAt: T0.Add(time.Minute)})
		if len(stale) != 1 || stale[0].ID != "busy-0" {
			t.Fatalf("List stale = %+v, want busy-0", stale)
		}
		if n := len(list(idem.ListFilter{CreatedBefore: T0.Add(time.Second)})); n != 7 {
			t.Fatalf("List created before T0+1s = %d, want 7 (4 done, busy-0, 2 released)", n)
		}
		// Paging in (scope, id) order visits every record once.
		var seen []string
		var after idem.Cursor
		for range 10 {
			page := list(idem.ListFilter{After: after, Limit: 4})
			for _, r := range page {
				seen = append(seen, r.Scope+"/"+r.ID)
			}
			if len(page) < 4 {
				break
			}
			after = page[len(page)-1].Cursor()
		}
		if len(seen) != 14 {
			t.Fatalf("paging saw %d records: %v", len(seen), seen)
		}
		for i := 1; i < len(seen); i++ {
			if seen[i-1] >= seen[i] {
				t.Fatalf("paging out of order at %d: %v", i, seen)
			}
		}

		stats, err := s.Stats(ctx, T0.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]idem.ScopeStats{}
		for _, st := range stats {
			by[st.Scope] = st
		}
		b, sh := by["billing"], by["shipping"]
		if b.Completed != 4 || b.InProgress != 3 || b.Released != 2 || b.Stale != 1 || b.Expired != 0 {
			t.Fatalf("billing stats = %+v", b)
		}
		if !sameTime(b.OldestInProgress, T0) {
			t.Fatalf("billing oldest in progress = %v, want %v", b.OldestInProgress, T0)
		}
		if sh.Completed != 5 || sh.Expired != 5 || sh.InProgress != 0 || !sh.OldestInProgress.IsZero() {
			t.Fatalf("shipping stats = %+v", sh)
		}
	})
}
