package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/sqlite"
	"github.com/idemgo/idem/store/storetest"
)

// version1DDL is the records table as schema version 1 created it: NOT NULL
// times, 0 for unset.
const version1DDL = `CREATE TABLE idem_records (
	scope TEXT NOT NULL, id TEXT NOT NULL, display_id TEXT NOT NULL, state TEXT NOT NULL,
	fingerprint TEXT NOT NULL DEFAULT '', result BLOB, token INTEGER NOT NULL, attempts INTEGER NOT NULL,
	lease_until INTEGER NOT NULL, expires_at INTEGER NOT NULL, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
	PRIMARY KEY (scope, id));
CREATE INDEX idem_records_expires_at ON idem_records (expires_at)`

// TestMigrateNullTimes: a version 1 table migrates to NULLable times; its
// 0s, which meant unset, become NULL (an expires_at of 0, "never expires",
// is still never swept), its other times are kept, and a time at the epoch
// written afterwards is the epoch.
func TestMigrateNullTimes(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "v1.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := s.DB()
	t0 := storetest.T0
	for _, q := range []string{
		version1DDL,
		`CREATE TABLE ` + sqlite.VersionTable + ` (table_name TEXT PRIMARY KEY, version INTEGER NOT NULL, applied_at INTEGER NOT NULL)`,
		`INSERT INTO ` + sqlite.VersionTable + ` VALUES ('idem_records', 1, 0)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	for _, row := range []struct {
		id      string
		expires int64
	}{{"never", 0}, {"dated", t0.Add(time.Hour).UnixMilli()}} {
		if _, err := db.Exec(`INSERT INTO idem_records VALUES ('v1', ?, ?, 'completed', 'fp', x'72', 5, 1, ?, ?, ?, ?)`,
			row.id, row.id, t0.UnixMilli(), row.expires, t0.UnixMilli(), t0.UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate from version 1: %v", err)
	}
	var v int
	if err := db.QueryRow(`SELECT version FROM ` + sqlite.VersionTable + ` WHERE table_name = 'idem_records'`).Scan(&v); err != nil || v != sqlite.SchemaVersion() {
		t.Fatalf("version after Migrate = %d, %v; want %d", v, err, sqlite.SchemaVersion())
	}
	rows, err := db.Query(`SELECT name, "notnull" FROM pragma_table_info('idem_records') WHERE name IN ('lease_until', 'expires_at', 'created_at', 'updated_at')`)
	if err != nil {
		t.Fatal(err)
	}
	cols := 0
	for rows.Next() {
		var name string
		var notNull int
		if err := rows.Scan(&name, &notNull); err != nil {
			t.Fatal(err)
		}
		if cols++; notNull != 0 {
			t.Errorf("column %s is still NOT NULL", name)
		}
	}
	rows.Close()
	if cols != 4 {
		t.Fatalf("found %d time columns, want 4", cols)
	}
	var nulls int
	if err := db.QueryRow(`SELECT count(*) FROM idem_records WHERE expires_at IS NULL`).Scan(&nulls); err != nil || nulls != 1 {
		t.Fatalf("rows with a NULL expires_at = %d, %v; want 1 (the one that had 0)", nulls, err)
	}
	never, err := s.Get(ctx, idem.Key{Scope: "v1", ID: "never"})
	if err != nil || !never.ExpiresAt.IsZero() || !never.CreatedAt.Equal(t0) || never.Token != 5 || string(never.Result) != "r" {
		t.Fatalf("migrated record = %+v, %v", never, err)
	}
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: t0.Add(1000 * time.Hour), Limit: 10}); err != nil || n != 1 {
		t.Fatalf("Sweep after Migrate = %d, %v; want 1 (the dated record; never the one that never expires)", n, err)
	}
	var idx int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'idem_records_expires_at'`).Scan(&idx); err != nil || idx != 1 {
		t.Fatalf("sweep index after Migrate: %d, %v", idx, err)
	}
}
