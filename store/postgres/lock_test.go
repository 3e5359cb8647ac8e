package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testenv"
)

// While another session holds the table's sweep lock, Sweep returns 0 at
// once and deletes nothing; afterwards it sweeps.
func TestSweepOneInstanceAtATime(t *testing.T) {
	addr := testenv.Postgres.Need(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	schema := fmt.Sprintf("idem_test_lock_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	defer pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
	s, err := New(pool, Options{Table: schema + ".records"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		k := idem.Key{Scope: "s", ID: fmt.Sprint(i)}
		c, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Now: t0, LeaseUntil: t0.Add(time.Second), ExpiresAt: t0.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Now: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
			t.Fatal(err) // settled: only settled records expire
		}
	}
	now := t0.Add(2 * time.Hour)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, lockClassSweep, lockKey(s.names.qualified)); err != nil {
			return err
		}
		n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 10})
		if err != nil || n != 0 {
			return fmt.Errorf("Sweep while another instance sweeps = %d, %v; want 0", n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 10}); err != nil || n != 5 {
		t.Fatalf("Sweep after the other instance = %d, %v; want 5", n, err)
	}
}
