package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/postgres"
	"github.com/idemgo/idem/store/storetest"
)

// Completing a claim is a HOT update: it changes no indexed column, so the
// new row version stays on its page and no index gets a new entry. This is
// what keeps the primary key and the sweep index from growing with the
// update rate (see the package doc). Renew and release are HOT too, and so
// is a complete up to a minute after its claim (see sweepAt).
func TestUpdatesAreHOT(t *testing.T) {
	addr := testenv.Postgres.Need(t)
	ctx := context.Background()
	// One connection: every statement runs in one server process, whose
	// statistics are flushed on demand before they are read.
	cfg, err := pgxpool.ParseConfig(addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	schema := newSchema(t, testPool(t))
	s, err := postgres.New(pool, postgres.Options{Table: schema + ".records"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// 20 short rows and their new versions fit one page: a non-HOT update
	// here can only come from a changed indexed column.
	t0 := storetest.T0
	var reqs []idem.ClaimRequest
	for i := range 20 {
		reqs = append(reqs, idem.ClaimRequest{Key: idem.Key{Scope: "hot", ID: fmt.Sprintf("k-%02d", i)},
			Now: t0, LeaseUntil: t0.Add(30 * time.Second), ExpiresAt: t0.Add(24 * time.Hour)})
	}
	claims, err := s.ClaimBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	// Handlers that took 59s, across a minute boundary (T0 is hh:04:05):
	// the completes keep the claim's sweep_at all the same.
	done := t0.Add(59 * time.Second)
	for i, c := range claims {
		k := reqs[i].Key
		switch i % 3 {
		case 0:
			err = s.Renew(ctx, idem.RenewRequest{Key: k, Token: c.Record.Token, Now: done, LeaseUntil: done.Add(30 * time.Second)})
		case 1:
			err = s.Release(ctx, idem.ReleaseRequest{Key: k, Token: c.Record.Token, Now: done})
		}
		if err != nil {
			t.Fatal(err)
		}
		if i%3 != 1 {
			err = s.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Result: []byte("ok"), Now: done, ExpiresAt: done.Add(24 * time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Skipf("cannot flush statistics on demand: %v", err)
	}
	var upd, hot int64
	if err := pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = $1::regclass`, s.Table()).Scan(&upd, &hot); err != nil {
		t.Fatal(err)
	}
	// 7 renews, 13 completes, 7 releases.
	if upd != 27 || hot != upd {
		t.Fatalf("%d updates, %d of them HOT; want 27 and all HOT", upd, hot)
	}
}
