package postgres_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/postgres"
	"github.com/idemgo/idem/store/storetest"
)

// Eight instances starting at once migrate the same table: all succeed and
// the migration is applied once.
func TestMigrateConcurrent(t *testing.T) {
	pool := testPool(t)
	schema := newSchema(t, pool)
	ctx := context.Background()
	var (
		wg   sync.WaitGroup
		errs = make(chan error, 8)
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := postgres.New(pool, postgres.Options{Table: schema + ".Inbox"})
			if err == nil {
				err = s.Migrate(ctx)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	var applied, distinct int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT version) FROM "`+schema+`"."Inbox_migrations"`).Scan(&applied, &distinct); err != nil {
		t.Fatal(err)
	}
	if applied != migrationCount || distinct != migrationCount {
		t.Fatalf("%d migration rows (%d versions), want each of the %d migrations once", applied, distinct, migrationCount)
	}
	// Again, later: nothing to do, no error.
	s, _ := postgres.New(pool, postgres.Options{Table: schema + ".Inbox"})
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	// The mixed-case name is quoted everywhere: the store works.
	k := idem.Key{Scope: "s", ID: "1"}
	if c, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Now: storetest.T0, LeaseUntil: storetest.T0.Add(1e9), ExpiresAt: storetest.T0.Add(1e12)}); err != nil || c.Outcome != idem.ClaimAcquired {
		t.Fatalf("claim on a mixed-case table: %v %v", c.Outcome, err)
	}
}

// migrationCount is the number of files in migrations/.
const migrationCount = 3

// The table is created as configured: fillfactor, hash partitions, the
// sweep index.
func TestMigrateLayout(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	for _, tc := range []struct {
		opts       postgres.Options
		partitions int
		reloption  string
	}{
		{postgres.Options{}, 0, "fillfactor=80"},
		{postgres.Options{FillFactor: 95, Partitions: 8}, 8, "fillfactor=95"},
	} {
		s := newStore(t, tc.opts)
		table := s.Table()
		var parts int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = $1::regclass`, table).Scan(&parts); err != nil {
			t.Fatal(err)
		}
		if parts != tc.partitions {
			t.Fatalf("%s: %d partitions, want %d", table, parts, tc.partitions)
		}
		// The storage options sit on the leaf tables.
		var withOption int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_class
			WHERE (oid = $1::regclass OR oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = $1::regclass))
			AND $2 = ANY(reloptions)`, table, tc.reloption).Scan(&withOption); err != nil {
			t.Fatal(err)
		}
		if want := max(tc.partitions, 1); withOption != want {
			t.Fatalf("%s: %d tables with %s, want %d", table, withOption, tc.reloption, want)
		}
		var indexed bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
			WHERE i.indrelid = $1::regclass AND a.attname = 'sweep_at')`, table).Scan(&indexed); err != nil {
			t.Fatal(err)
		}
		if !indexed {
			t.Fatalf("%s: no index on sweep_at", table)
		}
		// 002 dropped the CHECK on state from the table and its partitions.
		var checks int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE contype = 'c'
			AND (conrelid = $1::regclass OR conrelid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = $1::regclass))`,
			table).Scan(&checks); err != nil {
			t.Fatal(err)
		}
		if checks != 0 {
			t.Fatalf("%s: %d CHECK constraints left, want 0", table, checks)
		}
	}
}

// A table created by migration 001 alone (an earlier release) keeps a CHECK
// of its operator's and loses only the one on state when Migrate runs 002.
func TestMigrateDropsOnlyTheStateCheck(t *testing.T) {
	pool := testPool(t)
	schema := newSchema(t, pool)
	ctx := context.Background()
	s, err := postgres.New(pool, postgres.Options{Table: schema + ".old"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	table := s.Table()
	// Back to the 001 layout, plus a constraint of the operator's.
	for _, q := range []string{
		`ALTER TABLE ` + table + ` ADD CHECK (state IN (1, 2, 3))`,
		`ALTER TABLE ` + table + ` ADD CONSTRAINT scope_short CHECK (length(scope) < 100)`,
		`DELETE FROM "` + schema + `"."old_migrations" WHERE version = 2`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT conname FROM pg_constraint WHERE contype = 'c' AND conrelid = $1::regclass`, table)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0] != "scope_short" {
		t.Fatalf("CHECK constraints after Migrate: %v, want [scope_short]", names)
	}
}
