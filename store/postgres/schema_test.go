package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/postgres"
	"github.com/idemgo/idem/store/storetest"
)

func schemaClaim(s *postgres.Store, id string) (idem.Claim, error) {
	t0 := storetest.T0
	return s.Claim(context.Background(), idem.ClaimRequest{Key: idem.Key{Scope: "s", ID: id}, Now: t0,
		LeaseUntil: t0.Add(1e9), ExpiresAt: t0.Add(1e12)})
}

// The records table dropped, its migrations table left: the check and
// every call name the table, and Migrate makes it again.
func TestMigrateRecreatesDroppedTable(t *testing.T) {
	for _, opts := range []postgres.Options{{}, {Partitions: 2}} {
		s := newStore(t, opts)
		ctx := context.Background()
		if err := s.CheckSchema(ctx); err != nil {
			t.Fatalf("CheckSchema after Migrate: %v", err)
		}
		if _, err := testPool(t).Exec(ctx, `DROP TABLE `+s.Table()); err != nil {
			t.Fatal(err)
		}
		storetest.WantSchemaError(t, "CheckSchema", s.CheckSchema(ctx), "table "+s.Table(), "index")
		_, err := schemaClaim(s, "a")
		storetest.WantSchemaError(t, "Claim on a dropped table", err, "idem_records")
		if idem.IsPermanent(err) {
			t.Fatalf("Claim on a dropped table = %v: permanent, want a store failure", err)
		}
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("Migrate over a dropped table: %v", err)
		}
		if err := s.CheckSchema(ctx); err != nil {
			t.Fatalf("CheckSchema after the second Migrate: %v", err)
		}
		if c, err := schemaClaim(s, "a"); err != nil || c.Outcome != idem.ClaimAcquired {
			t.Fatalf("Claim after Migrate = %v, %v", c.Outcome, err)
		}
	}
}

// A dropped sweep index is recreated; a dropped partition of a table that
// is there cannot be, and Migrate says which.
func TestMigrateRepairsIndexAndNamesPartition(t *testing.T) {
	ctx := context.Background()
	pool := testPool(t)
	s := newStore(t, postgres.Options{})
	schema, _, _ := strings.Cut(s.Table(), ".")
	if _, err := pool.Exec(ctx, `DROP INDEX `+schema+`.idem_records_sweep_idx`); err != nil {
		t.Fatal(err)
	}
	storetest.WantSchemaError(t, "CheckSchema without the index", s.CheckSchema(ctx), "index")
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate without the index: %v", err)
	}
	if err := s.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after Migrate: %v", err)
	}

	p := newStore(t, postgres.Options{Partitions: 2})
	schema, _, _ = strings.Cut(p.Table(), ".")
	if _, err := pool.Exec(ctx, `DROP TABLE `+schema+`.idem_records_p1`); err != nil {
		t.Fatal(err)
	}
	storetest.WantSchemaError(t, "Migrate without a partition", p.Migrate(ctx), "partition", "idem_records_p1")
}
