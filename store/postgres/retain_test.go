package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/postgres"
	"github.com/idemgo/idem/store/storetest"
)

// TestRetainMovesSweepAt: a retained record's sweep_at, the indexed time
// the sweep looks rows up by, follows its new expiry (as a renewal moves
// it), so the sweep does not find and re-check the row at every round from
// its old expiry on.
func TestRetainMovesSweepAt(t *testing.T) {
	pool := testPool(t)
	schema := newSchema(t, pool)
	s, err := postgres.New(pool, postgres.Options{Table: schema + ".records"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := storetest.T0
	k := idem.Key{Scope: "job", ID: "step-a"}
	cl, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: cl.Record.Token, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	until := now.Add(5*time.Hour + 300*time.Millisecond)
	if err := s.Retain(ctx, idem.RetainRequest{Key: k, Token: cl.Record.Token, Now: now.Add(time.Minute), ExpiresAt: until}); err != nil {
		t.Fatal(err)
	}
	var expires, sweepAt time.Time
	if err := pool.QueryRow(ctx, `SELECT expires_at, sweep_at FROM `+s.Table()+` WHERE scope = $1 AND id = $2`,
		k.Scope, k.StoredID()).Scan(&expires, &sweepAt); err != nil {
		t.Fatal(err)
	}
	if !expires.Equal(until) || !sweepAt.Equal(until.Truncate(time.Second)) {
		t.Errorf("after Retain: expires_at %v, sweep_at %v; want %v and the second it falls in", expires, sweepAt, until)
	}
}
