package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/postgres"
	"github.com/idemgo/idem/store/storetest"
)

func TestInspector(t *testing.T) {
	s := newStore(t, postgres.Options{})
	ctx := context.Background()
	t0 := storetest.T0
	claim := func(scope, id string, now time.Time) idem.Claim {
		c, err := s.Claim(ctx, idem.ClaimRequest{Key: idem.Key{Scope: scope, ID: id}, Now: now,
			LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
		if err != nil || c.Outcome != idem.ClaimAcquired {
			t.Fatalf("claim %s/%s: %v %v", scope, id, c.Outcome, err)
		}
		return c
	}
	// billing: 3 completed, 1 released, 2 in progress (one of them stale at t0+2m).
	for i := range 3 {
		c := claim("billing", fmt.Sprintf("done-%d", i), t0)
		if err := s.Complete(ctx, idem.CompleteRequest{Key: c.Record.Key(), Token: c.Record.Token, Now: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	r := claim("billing", "released", t0)
	if err := s.Release(ctx, idem.ReleaseRequest{Key: r.Record.Key(), Token: r.Record.Token, Now: t0}); err != nil {
		t.Fatal(err)
	}
	claim("billing", "stale", t0)
	claim("billing", "live", t0.Add(2*time.Minute))
	// shipping: one in progress, past its retention by t0+2m: stale, never
	// expired (only settled records expire).
	claim("shipping", "old", t0.Add(-2*time.Hour))

	stats, err := s.Stats(ctx, t0.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := []idem.ScopeStats{
		{Scope: "billing", InProgress: 2, Completed: 3, Released: 1, Stale: 1, OldestInProgress: t0},
		{Scope: "shipping", InProgress: 1, Stale: 1, Expired: 0, OldestInProgress: t0.Add(-2 * time.Hour)},
	}
	if len(stats) != len(want) {
		t.Fatalf("Stats = %+v", stats)
	}
	for i := range want {
		got := stats[i]
		if !got.OldestInProgress.Equal(want[i].OldestInProgress) {
			t.Fatalf("Stats[%d].OldestInProgress = %v, want %v", i, got.OldestInProgress, want[i].OldestInProgress)
		}
		got.OldestInProgress = want[i].OldestInProgress
		if got != want[i] {
			t.Fatalf("Stats[%d] = %+v, want %+v", i, got, want[i])
		}
	}

	ids := func(rs []idem.Record) string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Scope+"/"+r.ID)
		}
		return fmt.Sprint(out)
	}
	for _, tc := range []struct {
		f    idem.ListFilter
		want string
	}{
		{idem.ListFilter{}, "[billing/done-0 billing/done-1 billing/done-2 billing/live billing/released billing/stale shipping/old]"},
		{idem.ListFilter{Limit: 2}, "[billing/done-0 billing/done-1]"},
		{idem.ListFilter{Limit: 2, After: idem.Record{Scope: "billing", ID: "done-1"}.Cursor()}, "[billing/done-2 billing/live]"},
		{idem.ListFilter{Scope: "shipping"}, "[shipping/old]"},
		{idem.ListFilter{State: idem.StateCompleted, Scope: "billing"}, "[billing/done-0 billing/done-1 billing/done-2]"},
		{idem.ListFilter{StaleAt: t0.Add(2 * time.Minute)}, "[billing/stale shipping/old]"},
		{idem.ListFilter{CreatedBefore: t0}, "[shipping/old]"},
	} {
		rs, err := s.List(ctx, tc.f)
		if err != nil {
			t.Fatalf("List(%+v): %v", tc.f, err)
		}
		if got := ids(rs); got != tc.want {
			t.Fatalf("List(%+v) = %s, want %s", tc.f, got, tc.want)
		}
	}
	if _, err := s.List(ctx, idem.ListFilter{State: "bogus"}); err == nil {
		t.Fatal("List with an unknown state succeeded")
	}
}
