package mysql_test

import (
	"context"
	"errors"
	"strings"
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

// wantMissing fails t unless err is an *idem.SchemaError naming each of want.
func wantMissing(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	var se *idem.SchemaError
	if !errors.As(err, &se) || !errors.Is(err, idem.ErrSchemaMissing) {
		t.Fatalf("%s = %v; want an *idem.SchemaError", what, err)
	}
	got := strings.Join(se.Missing, ", ")
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Fatalf("%s names %q; want %q among them", what, got, w)
		}
	}
	if !strings.Contains(err.Error(), "idem migrate") {
		t.Fatalf("%s = %v; want the fix (idem migrate) in the message", what, err)
	}
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
	wantMissing(t, "CheckSchema", s.CheckSchema(ctx), "table "+s.Table(), "index")
	_, err := schemaClaim(s, "a")
	wantMissing(t, "Claim on a dropped table", err, s.Table())
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
	if v, err := s.SchemaVersion(ctx); err != nil || v < 2 {
		t.Fatalf("SchemaVersion after the second Migrate = %d, %v", v, err)
	}

	if _, err := db.Exec("ALTER TABLE `" + s.Table() + "` DROP INDEX expires_at"); err != nil {
		t.Fatal(err)
	}
	wantMissing(t, "CheckSchema without the index", s.CheckSchema(ctx), "index "+s.Table()+".expires_at")
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate without the index: %v", err)
	}
	if err := s.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after Migrate: %v", err)
	}
}
