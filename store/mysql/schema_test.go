package mysql_test

import (
	"context"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/mysql"
	"github.com/idemgo/idem/store/storetest"
)

func schemaClaim(s *mysql.Store, id string) (idem.Claim, error) {
	t0 := storetest.T0
	return s.Claim(context.Background(), idem.ClaimRequest{Key: idem.Key{Scope: "s", ID: id}, Now: t0,
		LeaseUntil: t0.Add(1e9), ExpiresAt: t0.Add(1e12)})
}

// The records table dropped, its migrations table left: the check and
// every call name the table, and Migrate makes it again; a dropped sweep
// index is recreated.
func TestMigrateRecreatesDroppedSchema(t *testing.T) {
	db := openDB(t, true, false)
	s := newStore(t, db)
	ctx := context.Background()
	if err := s.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after Migrate: %v", err)
	}
	if _, err := db.Exec("DROP TABLE `" + s.Table() + "`"); err != nil {
		t.Fatal(err)
	}
	storetest.WantSchemaError(t, "CheckSchema", s.CheckSchema(ctx), "table "+s.Table(), "index")
	_, err := schemaClaim(s, "a")
	storetest.WantSchemaError(t, "Claim on a dropped table", err, s.Table())
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate over a dropped table: %v", err)
	}
	if err := s.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after the second Migrate: %v", err)
	}
	if c, err := schemaClaim(s, "a"); err != nil || c.Outcome != idem.ClaimAcquired {
		t.Fatalf("Claim after Migrate = %v, %v", c.Outcome, err)
	}
	if v, err := s.SchemaVersion(ctx); err != nil || v < 2 {
		t.Fatalf("SchemaVersion after the second Migrate = %d, %v", v, err)
	}

	if _, err := db.Exec("ALTER TABLE `" + s.Table() + "` DROP INDEX expires_at"); err != nil {
		t.Fatal(err)
	}
	storetest.WantSchemaError(t, "CheckSchema without the index", s.CheckSchema(ctx), "index "+s.Table()+".expires_at")
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate without the index: %v", err)
	}
	if err := s.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after Migrate: %v", err)
	}
}
