package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/mysql"
)

// TestMigrateNullTimes: a table at schema version 1 (NOT NULL times, 0 for
// unset) migrates to NULLable times; its expires_at of 0, "never expires",
// becomes NULL and is still never swept, and the other rows are kept.
func TestMigrateNullTimes(t *testing.T) {
	db := openDB(t, true, false)
	ctx := context.Background()
	table := tableName(t)
	t.Cleanup(func() { dropStore(t, db, table) })
	for _, q := range []string{
		"CREATE TABLE `" + table + "` (scope VARBINARY(200) NOT NULL, id VARBINARY(200) NOT NULL, display_id VARBINARY(1024) NULL," +
			" state ENUM('in_progress', 'completed', 'released') NOT NULL, fingerprint VARBINARY(1024) NOT NULL DEFAULT ''," +
			" result LONGBLOB NULL, token BIGINT NOT NULL, attempts INT NOT NULL, lease_until BIGINT NOT NULL," +
			" expires_at BIGINT NOT NULL, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL," +
			" PRIMARY KEY (scope, id), KEY expires_at (expires_at)) ENGINE = InnoDB",
		"CREATE TABLE `" + table + "_migrations` (version INT NOT NULL PRIMARY KEY, name VARCHAR(255) NOT NULL, applied_at BIGINT NOT NULL) ENGINE = InnoDB",
		"INSERT INTO `" + table + "_migrations` VALUES (1, '001_records.sql', 0)",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	for id, expires := range map[string]int64{"never": 0, "dated": t0.Add(time.Hour).UnixMilli()} {
		if _, err := db.Exec("INSERT INTO `"+table+"` VALUES ('v1', ?, NULL, 'completed', 'fp', NULL, 5, 1, ?, ?, ?, ?)",
			id, t0.UnixMilli(), expires, t0.UnixMilli(), t0.UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	s, err := mysql.New(db, mysql.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate from version 1: %v", err)
	}
	var nullable int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ?"+
		" AND column_name IN ('lease_until', 'expires_at', 'created_at', 'updated_at') AND is_nullable = 'YES'", table).Scan(&nullable); err != nil || nullable != 4 {
		t.Fatalf("NULLable time columns = %d, %v; want 4", nullable, err)
	}
	never, err := s.Get(ctx, idem.Key{Scope: "v1", ID: "never"})
	if err != nil || !never.ExpiresAt.IsZero() || !never.CreatedAt.Equal(t0) || never.Token != 5 {
		t.Fatalf("migrated record = %+v, %v; want no expiry, the rest kept", never, err)
	}
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: t0.Add(1000 * time.Hour), Limit: 10}); err != nil || n != 1 {
		t.Fatalf("Sweep after Migrate = %d, %v; want 1 (the dated record; never the one that never expires)", n, err)
	}
	stats, err := s.Stats(ctx, t0.Add(1000*time.Hour))
	if err != nil || len(stats) != 1 || stats[0].Completed != 1 || stats[0].Expired != 0 {
		t.Fatalf("Stats after Migrate = %+v, %v", stats, err)
	}
}
