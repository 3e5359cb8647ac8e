package sqlite_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/sqlite"
	"github.com/idemgo/idem/store/storetest"
)

func TestInspector(t *testing.T) {
	s := openStore(t, sqlite.Options{Table: "inspected"})
	ctx := context.Background()
	t0 := storetest.T0
	claim := func(scope, id string, now time.Time, lease time.Duration) idem.Claim {
		t.Helper()
		c, err := s.Claim(ctx, idem.ClaimRequest{Key: idem.Key{Scope: scope, ID: id}, Now: now,
			LeaseUntil: now.Add(lease), ExpiresAt: now.Add(max(lease, time.Hour))})
		if err != nil || c.Outcome != idem.ClaimAcquired {
			t.Fatalf("claim %s/%s: %v %v", scope, id, c.Outcome, err)
		}
		return c
	}
	// billing: 3 completed (retention 1h, 2h, 3h), 1 released, 1 in
	// progress whose lease ended at t0; shipping: 2 in progress, live.
	for i := range 3 {
		c := claim("billing", fmt.Sprintf("b-%d", i), t0, time.Minute)
		if err := s.Complete(ctx, idem.CompleteRequest{Key: c.Record.Key(), Token: c.Record.Token, Now: t0, ExpiresAt: t0.Add(time.Duration(i+1) * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	r := claim("billing", "b-rel", t0, time.Minute)
	if err := s.Release(ctx, idem.ReleaseRequest{Key: r.Record.Key(), Token: r.Record.Token, Now: t0}); err != nil {
		t.Fatal(err)
	}
	claim("billing", "b-stale", t0.Add(-time.Second), time.Second)
	claim("shipping", "s-1", t0.Add(time.Second), 3*time.Hour)
	claim("shipping", "s-2", t0.Add(2*time.Second), 3*time.Hour)

	// At t0+90m b-0 and b-rel (retention 1h) have expired; b-stale, in
	// progress, is stale and never expires.
	now := t0.Add(90 * time.Minute)
	stats, err := s.Stats(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	want := []idem.ScopeStats{
		{Scope: "billing", InProgress: 1, Completed: 3, Released: 1, Stale: 1, Expired: 2, OldestInProgress: t0.Add(-time.Second)},
		{Scope: "shipping", InProgress: 2, OldestInProgress: t0.Add(time.Second)},
	}
	if len(stats) != len(want) {
		t.Fatalf("stats = %+v", stats)
	}
	for i := range want {
		got := stats[i]
		if got.Scope != want[i].Scope || got.InProgress != want[i].InProgress || got.Completed != want[i].Completed ||
			got.Released != want[i].Released || got.Stale != want[i].Stale || got.Expired != want[i].Expired ||
			!got.OldestInProgress.Equal(want[i].OldestInProgress) {
			t.Errorf("stats[%d] = %+v, want %+v", i, got, want[i])
		}
	}

	list := func(f idem.ListFilter) string {
		t.Helper()
		recs, err := s.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range recs {
			ids = append(ids, r.Scope+"/"+r.ID)
		}
		return fmt.Sprint(ids)
	}
	checks := []struct {
		f    idem.ListFilter
		want string
	}{
		{idem.ListFilter{}, "[billing/b-0 billing/b-1 billing/b-2 billing/b-rel billing/b-stale shipping/s-1 shipping/s-2]"},
		{idem.ListFilter{Scope: "shipping"}, "[shipping/s-1 shipping/s-2]"},
		{idem.ListFilter{State: idem.StateCompleted}, "[billing/b-0 billing/b-1 billing/b-2]"},
		{idem.ListFilter{StaleAt: t0.Add(30 * time.Second)}, "[billing/b-stale]"},
		{idem.ListFilter{CreatedBefore: t0}, "[billing/b-stale]"},
		{idem.ListFilter{Limit: 2}, "[billing/b-0 billing/b-1]"},
		{idem.ListFilter{Limit: 2, After: idem.Record{Scope: "billing", ID: "b-1"}.Cursor()}, "[billing/b-2 billing/b-rel]"},
		{idem.ListFilter{After: idem.Record{Scope: "billing", ID: "b-stale"}.Cursor()}, "[shipping/s-1 shipping/s-2]"},
		{idem.ListFilter{Scope: "nobody"}, "[]"},
	}
	for _, c := range checks {
		if got := list(c.f); got != c.want {
			t.Errorf("List(%+v) = %s, want %s", c.f, got, c.want)
		}
	}
}
