package idem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
)

// storeOnly hides every optional interface of the store it wraps.
type storeOnly struct{ idem.Store }

// Supersede reaches a Superseder and says so of a store that is not one,
// without touching it.
func TestSupersede(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	s := memory.New()
	k := idem.Key{Scope: "s", ID: "1"}
	c, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Fingerprint: "old", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	req := idem.SupersedeRequest{Key: k, Token: c.Record.Token, Fingerprint: "new", Now: now}
	if err := idem.Supersede(ctx, storeOnly{s}, req); !errors.Is(err, idem.ErrSupersedeUnsupported) {
		t.Fatalf("Supersede on a store without it: %v, want ErrSupersedeUnsupported", err)
	}
	if r, _ := s.Get(ctx, k); r.State != idem.StateCompleted || r.Fingerprint != "old" {
		t.Fatalf("an unsupported Supersede changed the record: %+v", r)
	}
	if err := idem.Supersede(ctx, s, req); err != nil {
		t.Fatalf("Supersede on a Superseder: %v", err)
	}
	if r, _ := s.Get(ctx, k); r.State != idem.StateReleased || r.Fingerprint != "new" {
		t.Fatalf("after Supersede: %+v, want released with the new content", r)
	}
}
