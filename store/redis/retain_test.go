package redisidem_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// TestRetainMovesTTL: a retained record's Redis expiry is the new
// retention measured from the request's now (the caller's clock, here
// years from Redis's), as Complete sets it, so Redis keeps the record as
// long as the caller asked and no longer.
func TestRetainMovesTTL(t *testing.T) {
	c := standalone.client(t)
	s := newStore(t, c)
	ctx := context.Background()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	k := idem.Key{Scope: "retain", ID: "step-a"}
	cl, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: cl.Record.Token, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	later := now.Add(30 * time.Minute)
	if err := s.Retain(ctx, idem.RetainRequest{Key: k, Token: cl.Record.Token, Now: later, ExpiresAt: later.Add(5 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// The test's own round trips since the Retain are the slack; an
	// expiry at the absolute time would be years away.
	if d, _ := c.PTTL(ctx, s.Key(k)).Result(); d > 5*time.Hour || d < 5*time.Hour-time.Minute {
		t.Errorf("PTTL after Retain = %v, want about 5h (the new expiry less the request's now)", d)
	}
	if r, err := s.Get(ctx, k); err != nil || !r.ExpiresAt.Equal(later.Add(5*time.Hour)) {
		t.Errorf("record after Retain: %+v %v", r, err)
	}
}
