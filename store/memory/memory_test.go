package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
	"github.com/idemgo/idem/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) idem.Store { return memory.New() })
}

func TestInspector(t *testing.T) {
	storetest.RunInspector(t, func(t *testing.T) storetest.InspectorStore { return memory.New() })
}

// A batch with one request without its times is refused whole: nothing is
// written, and the error is permanent invalid data.
func TestBatchRejectsBeforeWriting(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	req := func(id string) idem.ClaimRequest {
		return idem.ClaimRequest{Key: idem.Key{Scope: "s", ID: id}, Now: storetest.T0,
			LeaseUntil: storetest.T0.Add(time.Second), ExpiresAt: storetest.T0.Add(time.Hour)}
	}
	bad := req("bad")
	bad.ExpiresAt = time.Time{}
	if _, err := s.ClaimBatch(ctx, []idem.ClaimRequest{req("good"), bad}); !errors.Is(err, idem.ErrInvalidData) || !idem.IsPermanent(err) {
		t.Fatalf("ClaimBatch = %v; want permanent ErrInvalidData", err)
	}
	if s.Len() != 0 {
		t.Fatalf("%d records written by a refused batch", s.Len())
	}
}

// Renew carries the expiry with the lease, never moving it earlier.
func TestRenewCarriesExpiry(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	k := idem.Key{Scope: "s", ID: "k"}
	c, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Now: storetest.T0, LeaseUntil: storetest.T0.Add(time.Second), ExpiresAt: storetest.T0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	renew := func(until time.Time) idem.Record {
		if err := s.Renew(ctx, idem.RenewRequest{Key: k, Token: c.Record.Token, Now: storetest.T0, LeaseUntil: until}); err != nil {
			t.Fatal(err)
		}
		r, _ := s.Get(ctx, k)
		return r
	}
	if r := renew(storetest.T0.Add(time.Minute)); !r.ExpiresAt.Equal(storetest.T0.Add(time.Hour)) {
		t.Fatalf("a lease inside the retention moved the expiry to %v", r.ExpiresAt)
	}
	if r := renew(storetest.T0.Add(2 * time.Hour)); !r.ExpiresAt.Equal(storetest.T0.Add(2 * time.Hour)) {
		t.Fatalf("a lease past the retention left the expiry at %v", r.ExpiresAt)
	}
}
