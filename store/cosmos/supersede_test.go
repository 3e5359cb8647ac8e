package cosmos_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storetest"
)

// A superseded record keeps its retention, and the item the time to live
// that retention leaves: a replace restarts Cosmos DB's countdown, so the
// ttl is counted again from the supersede's Now, and the record goes when
// it would have without it.
func TestSupersedeKeepsNativeExpiry(t *testing.T) {
	srv, s := ownServer(t)
	ctx := context.Background()
	now := storetest.T0
	k := idem.Key{Scope: "x", ID: "done"}
	c, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Fingerprint: "old", Now: now, LeaseUntil: now.Add(10 * time.Second), ExpiresAt: now.Add(time.Hour)})
	if err != nil || c.Outcome != idem.ClaimAcquired {
		t.Fatalf("Claim = %v, %v", c.Outcome, err)
	}
	if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Now: now, ExpiresAt: now.Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	srv.Advance(time.Hour)
	if err := s.Supersede(ctx, idem.SupersedeRequest{Key: k, Token: c.Record.Token, Fingerprint: "new", Now: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if m, err := item(t, s, k); err != nil || m["ttl"] != 3600.0 || m["state"] != string(idem.StateReleased) || m["fp"] != "new" {
		t.Fatalf("the superseded item: %v (%v); want released, fp new, ttl 3600 (the hour its retention leaves)", m, err)
	}
	srv.Advance(time.Hour - time.Second)
	if _, err := s.Get(ctx, k); err != nil {
		t.Fatalf("the superseded record within its retention: %v", err)
	}
	srv.Advance(2 * time.Second)
	if _, err := s.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("the superseded record after its retention: %v; want it gone", err)
	}
}
