package redisidem_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
	"github.com/idemgo/idem/store/storetest"
)

// TestInspectorMatchesMemory applies the same history to this store and to
// the in-memory reference store and compares List (filters, paging) and
// Stats.
func TestInspectorMatchesMemory(t *testing.T) { testInspectorMatchesMemory(t, standalone) }

func testInspectorMatchesMemory(t *testing.T, on backend) {
	rs := newStore(t, on.client(t))
	ms := memory.New()
	ctx := context.Background()
	t0 := storetest.T0
	for _, s := range []idem.Store{rs, ms} {
		for i := range 60 {
			scope := []string{"billing", "shipping", "odd{scope}:x"}[i%3]
			k := idem.Key{Scope: scope, ID: fmt.Sprintf("id-%02d", i)}
			now := t0.Add(time.Duration(i) * time.Second)
			req := idem.ClaimRequest{Key: k, Fingerprint: "fp", Now: now, LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(time.Hour),
				NewToken: 1<<40 + int64(i)} // the same fresh token in both stores
			c, err := s.Claim(ctx, req)
			if err != nil || c.Outcome != idem.ClaimAcquired {
				t.Fatalf("claim %s: %v %v", k, c.Outcome, err)
			}
			switch i % 4 {
			case 0:
				err = s.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Result: []byte("r"), Now: now, ExpiresAt: now.Add(time.Duration(i+1) * time.Minute)})
			case 1:
				err = s.Release(ctx, idem.ReleaseRequest{Key: k, Token: c.Record.Token, Now: now})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	at := t0.Add(40 * time.Second)
	filters := []idem.ListFilter{
		{},
		{Limit: 7},
		{Scope: "billing"},
		{Scope: "odd{scope}:x", Limit: 3},
		{State: idem.StateCompleted},
		{State: idem.StateInProgress, StaleAt: at},
		{CreatedBefore: t0.Add(20 * time.Second)},
		{After: idem.Record{Scope: "billing", ID: "id-30"}.Cursor(), Limit: 10},
		{Scope: "shipping", After: idem.Record{Scope: "shipping", ID: "id-10"}.Cursor()},
	}
	for _, f := range filters {
		got, err := rs.List(ctx, f)
		if err != nil {
			t.Fatalf("List(%+v): %v", f, err)
		}
		want, _ := ms.List(ctx, f)
		if !sameRecords(got, want) {
			t.Errorf("List(%+v):\n got %d records %v\nwant %d records %v", f, len(got), ids(got), len(want), ids(want))
		}
	}
	// Paging through everything 8 at a time visits each record once.
	var all []idem.Record
	f := idem.ListFilter{Limit: 8}
	for {
		page, err := rs.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if len(page) < 8 {
			break
		}
		f.After = page[len(page)-1].Cursor()
	}
	if want, _ := ms.List(ctx, idem.ListFilter{Limit: 1000}); !sameRecords(all, want) {
		t.Errorf("paged List: got %v, want %v", ids(all), ids(want))
	}

	for _, now := range []time.Time{t0, at, t0.Add(10 * time.Minute), t0.Add(2 * time.Hour)} {
		got, err := rs.Stats(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := ms.Stats(ctx, now)
		if !reflect.DeepEqual(normStats(got), normStats(want)) {
			t.Errorf("Stats(%v):\n got %+v\nwant %+v", now, got, want)
		}
	}
}

func ids(rs []idem.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Scope + "/" + r.ID
	}
	return out
}

func sameRecords(a, b []idem.Record) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Scope != y.Scope || x.ID != y.ID || x.DisplayID != y.DisplayID || x.State != y.State ||
			x.Fingerprint != y.Fingerprint || string(x.Result) != string(y.Result) || x.Token != y.Token ||
			x.Attempts != y.Attempts || !x.LeaseUntil.Equal(y.LeaseUntil) || !x.ExpiresAt.Equal(y.ExpiresAt) ||
			!x.CreatedAt.Equal(y.CreatedAt) || !x.UpdatedAt.Equal(y.UpdatedAt) {
			return false
		}
	}
	return true
}

func normStats(ss []idem.ScopeStats) []idem.ScopeStats {
	out := make([]idem.ScopeStats, len(ss))
	for i, s := range ss {
		s.OldestInProgress = s.OldestInProgress.UTC()
		out[i] = s
	}
	return out
}
