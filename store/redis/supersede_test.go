package redisidem_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// TestSupersedeKeepsTTL: a superseded record keeps its retention, and the
// key's Redis expiry is what that retention leaves from the request's now
// (the caller's clock, here years from Redis's), so Redis removes it when
// it would have without the supersede.
func TestSupersedeKeepsTTL(t *testing.T) {
	c := standalone.client(t)
	s := newStore(t, c)
	ctx := context.Background()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	k := idem.Key{Scope: "supersede", ID: "order-7"}
	cl, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Fingerprint: "old", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: cl.Record.Token, Now: now, ExpiresAt: now.Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	later := now.Add(30 * time.Minute)
	if err := s.Supersede(ctx, idem.SupersedeRequest{Key: k, Token: cl.Record.Token, Fingerprint: "new", Now: later}); err != nil {
		t.Fatal(err)
	}
	// The test's own round trips since the Supersede are the slack.
	if d, _ := c.PTTL(ctx, s.Key(k)).Result(); d > 90*time.Minute || d < 90*time.Minute-time.Minute {
		t.Errorf("PTTL after Supersede = %v, want about 1h30m (the retention end less the request's now)", d)
	}
	if r, err := s.Get(ctx, k); err != nil || r.State != idem.StateReleased || r.Fingerprint != "new" || !r.ExpiresAt.Equal(now.Add(2*time.Hour)) {
		t.Errorf("record after Supersede: %+v %v", r, err)
	}
}
