package entity_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/entity"
	"github.com/idemgo/idem/internal/inboxcheck"
	"github.com/idemgo/idem/store/storekit"
)

// entity.Store is a TxStore for *sql.Tx, so idem.NewInbox and idem.DoTx take it.
var _ idem.TxStore[*sql.Tx] = (*entity.Store)(nil)

// entity.Store keeps no records, so it is no idem.Store: idem.New cannot
// take it, and a two-phase guard over it cannot be built by mistake.
func TestStoreIsNotAStore(t *testing.T) {
	var s any = entity.NewStore(nil, nil)
	if _, ok := s.(idem.Store); ok {
		t.Fatal("*entity.Store is an idem.Store")
	}
	inboxcheck.NotAStore[*sql.Tx](t, s)
}

// Mark acquires without writing, but checks its request first (a missing
// time is a permanent *idem.InvalidDataError, returned as it is) and
// reports a record with the request's token, a fresh random one when the
// request has none: never a fixed token that a zombie could share.
func TestMarkPreparesTheRequest(t *testing.T) {
	ctx := context.Background()
	s := entity.NewStore(nil, nil)
	now := time.Now()
	req := idem.ClaimRequest{
		Key: idem.Key{Scope: "orders", ID: "o-1"}, Fingerprint: string([]byte{0xff, 0, 1}),
		Now: now, LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(time.Second),
	}
	for name, bad := range map[string]func(r *idem.ClaimRequest){
		"zero ExpiresAt":  func(r *idem.ClaimRequest) { r.ExpiresAt = time.Time{} },
		"zero LeaseUntil": func(r *idem.ClaimRequest) { r.LeaseUntil = time.Time{} },
		"zero Now":        func(r *idem.ClaimRequest) { r.Now = time.Time{} },
	} {
		r := req
		bad(&r)
		_, err := s.Mark(ctx, nil, r)
		var ide *idem.InvalidDataError
		if !errors.As(err, &ide) || !errors.Is(err, idem.ErrInvalidData) {
			t.Fatalf("Mark with %s = %v, want *idem.InvalidDataError", name, err)
		}
		if _, perr := storekit.PrepareClaim(r); err.Error() != perr.Error() {
			t.Fatalf("Mark with %s: error %q is not Prepare's %q", name, err, perr)
		}
	}
	if _, err := s.Mark(ctx, nil, idem.ClaimRequest{Key: idem.Key{Scope: "orders"}, Now: now, LeaseUntil: now, ExpiresAt: now}); !errors.Is(err, idem.ErrNoKey) {
		t.Fatalf("Mark without an id = %v", err)
	}

	seen := map[int64]bool{}
	for range 100 {
		c, err := s.Mark(ctx, nil, req)
		if err != nil || c.Outcome != idem.ClaimAcquired {
			t.Fatalf("Mark = %v, %v", c, err)
		}
		r := c.Record
		if r.Token < 1<<32 || seen[r.Token] {
			t.Fatalf("token %d: not a fresh random token (seen before: %v)", r.Token, seen[r.Token])
		}
		seen[r.Token] = true
		if r.Fingerprint != storekit.StoredFingerprint(req.Fingerprint) || r.ExpiresAt.Before(r.LeaseUntil) ||
			!r.LeaseUntil.Equal(req.LeaseUntil) || r.Scope != "orders" || r.ID != "o-1" || r.Attempts != 1 {
			t.Fatalf("record %+v is not the prepared request's", r)
		}
	}
	given := req
	given.NewToken = 1 << 40
	if c, err := s.Mark(ctx, nil, given); err != nil || c.Record.Token != given.NewToken {
		t.Fatalf("Mark with NewToken %d = token %d, %v", given.NewToken, c.Record.Token, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Mark(cancelled, nil, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("Mark on a cancelled context = %v", err)
	}
}
