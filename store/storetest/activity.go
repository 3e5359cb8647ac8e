package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// The rule "a console apart from the consumers sees the fleet's work": a
// store counts its records over time (idem.ActivityCounter), each once by
// its CreatedAt and once by its UpdatedAt under its current state, so every
// process reads the same per-scope rates from the store they share.

// activityTests are run by Run.
var activityTests = []struct {
	name string
	fn   func(t *testing.T, s idem.Store)
}{
	{"ActivityCountsByTime", testActivityCountsByTime},
}

func testActivityCountsByTime(t *testing.T, s idem.Store) {
	ac, ok := s.(idem.ActivityCounter)
	if !ok {
		t.Skipf("%T is not an idem.ActivityCounter (the console's fleet charts need it)", s)
	}
	ctx := context.Background()
	at := func(sec int) time.Time { return T0.Add(time.Duration(sec) * time.Second) }
	claim := func(k idem.Key, sec int) int64 {
		return mustClaim(t, s, claimReq(k, "fp", at(sec)), idem.ClaimAcquired).Record.Token
	}
	release := func(k idem.Key, token int64, sec int) {
		if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: token, Now: at(sec)}); err != nil {
			t.Fatalf("Release(%s): %v", k, err)
		}
	}
	// The window: four minutes from T0.
	a := claim(key("a"), 10) // claimed in minute 0, completed in 1
	mustComplete(t, s, key("a"), a, nil, at(70))
	b := claim(key("b"), 20) // claimed in 0, released in 2
	release(key("b"), b, 130)
	claim(key("c"), 150)     // claimed and in progress in 2
	d := claim(key("d"), 30) // claimed in 0, released, claimed again in 3
	release(key("d"), d, 40)
	claim(key("d"), 190)
	e := claim(key("e"), -30) // claimed before the window, completed in 0
	mustComplete(t, s, key("e"), e, nil, at(50))
	claim(key("f"), 250) // after the window
	other := idem.Key{Scope: "other", ID: "g"}
	g := claim(other, 5)
	mustComplete(t, s, other, g, nil, at(6))

	q := idem.ActivityQuery{From: T0, Step: time.Minute, Buckets: 4}
	got, err := ac.Activity(ctx, q)
	if err != nil {
		t.Fatalf("Activity: %v", err)
	}
	want := []idem.ScopeActivity{
		{Scope: "orders", Buckets: []idem.ActivityBucket{
			{Claimed: 3, Completed: 1},
			{Completed: 1},
			{Claimed: 1, Released: 1, InProgress: 1},
			{InProgress: 1, Retried: 1},
		}},
		{Scope: "other", Buckets: []idem.ActivityBucket{{Claimed: 1, Completed: 1}, {}, {}, {}}},
	}
	for i := range want {
		for j := range want[i].Buckets {
			want[i].Buckets[j].Start = T0.Add(time.Duration(j) * time.Minute)
		}
	}
	checkActivity(t, "every scope", got, want)

	q.Scope = "orders"
	got, err = ac.Activity(ctx, q)
	if err != nil {
		t.Fatalf("Activity(scope orders): %v", err)
	}
	checkActivity(t, "scope orders", got, want[:1])

	q = idem.ActivityQuery{Scope: "nothing", From: T0, Step: time.Minute, Buckets: 4}
	if got, err := ac.Activity(ctx, q); err != nil || len(got) != 0 {
		t.Errorf("Activity of a scope without records = %v, %v; want none", got, err)
	}
	for _, bad := range []idem.ActivityQuery{
		{From: T0, Step: 0, Buckets: 4},
		{From: T0, Step: time.Minute},
		{Step: time.Minute, Buckets: 4},
		{From: T0, Step: time.Minute, Buckets: idem.MaxActivityBuckets + 1},
	} {
		if _, err := ac.Activity(ctx, bad); !errors.Is(err, idem.ErrInvalidOptions) {
			t.Errorf("Activity(%+v) = %v, want ErrInvalidOptions", bad, err)
		}
	}
}

func checkActivity(t *testing.T, what string, got, want []idem.ScopeActivity) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d scopes %+v, want %d", what, len(got), got, len(want))
	}
	for i := range want {
		if got[i].Scope != want[i].Scope || len(got[i].Buckets) != len(want[i].Buckets) {
			t.Fatalf("%s: scope %d = %q with %d buckets, want %q with %d", what, i, got[i].Scope, len(got[i].Buckets), want[i].Scope, len(want[i].Buckets))
		}
		for j, w := range want[i].Buckets {
			g := got[i].Buckets[j]
			if !g.Start.Equal(w.Start) {
				t.Errorf("%s: %s bucket %d starts %v, want %v", what, w.Start, j, g.Start, w.Start)
			}
			g.Start = w.Start
			if g != w {
				t.Errorf("%s: scope %s minute %d = %+v, want %+v", what, want[i].Scope, j, g, w)
			}
		}
	}
}
