package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/pgtest"
	"github.com/idemgo/idem/load"
	"github.com/idemgo/idem/store/postgres"
	"github.com/idemgo/idem/store/sqlite"
)

// pairs is a CSV source of the rows given as "id=v": key id, fingerprint
// the hash of v, values (id, v).
func pairs(t *testing.T, kv ...string) load.Source {
	t.Helper()
	csv := "id,v\n" + strings.ReplaceAll(strings.Join(kv, "\n"), "=", ",")
	src, err := load.NewCSV(strings.NewReader(csv), load.CSVOptions{Key: []string{"id"}, Fingerprint: []string{"v"}})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// The inbox on SQLite: one marker per row (Mark), in the batch's
// transaction with the rows.
func TestMarkedSQLite(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "load.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.DB().ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, v TEXT)`); err != nil {
		t.Fatal(err)
	}
	fail := false
	w := load.Marked[*sql.Tx](store, func(ctx context.Context, tx *sql.Tx, rows []load.Row) error {
		for _, r := range rows {
			if fail && r.Key == "c" {
				return errors.New("disk full")
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, v) VALUES (?, ?)`, r.Values...); err != nil {
				return err
			}
		}
		return nil
	})
	clk := time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC)
	l, err := load.New[*sql.Tx](store, w, load.Options{Scope: "orders-import", BatchSize: 2, Retention: 24 * time.Hour,
		Clock: func() time.Time { return clk }})
	if err != nil {
		t.Fatal(err)
	}
	fail = true
	if sum, err := l.Run(ctx, pairs(t, "a=1", "b=2", "c=3", "d=4")); err == nil || sum.New != 2 {
		t.Fatalf("failing load: %v, %v", sum, err)
	}
	fail = false
	sum, err := l.Run(ctx, pairs(t, "a=1", "b=2", "c=3", "d=4", "b=X"))
	if !errors.Is(err, idem.ErrConflict) || sum.New != 2 || sum.Duplicate != 2 || sum.Conflict != 1 || sum.Conflicts[0].Row != 5 {
		t.Fatalf("rerun: %v, %v", sum, err)
	}
	var n int
	store.DB().QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&n)
	if n != 4 {
		t.Errorf("%d orders, want 4: the failed batch's marks rolled back with its rows", n)
	}
	rec, err := store.Get(ctx, idem.Key{Scope: "orders-import", ID: "c"})
	if err != nil || rec.State != idem.StateCompleted || rec.Fingerprint != load.Hash("3") || !rec.ExpiresAt.Equal(clk.Add(24*time.Hour)) {
		t.Errorf("marker %+v, %v", rec, err)
	}
}

// The inbox on PostgreSQL: a batch's markers are one statement
// (MarkBatch). Two loads of overlapping inputs at once write each row once.
func TestMarkedPostgres(t *testing.T) {
	ctx := context.Background()
	pool, schema, _ := pgtest.Schema(t, "load_test")
	store, err := postgres.New(pool, postgres.Options{Table: schema + ".idem_records"})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.orders (id text, v text)`); err != nil { // no unique key: the markers dedup
		t.Fatal(err)
	}
	var _ load.BatchMarker[pgx.Tx] = store
	w := load.Marked[pgx.Tx](store, func(ctx context.Context, tx pgx.Tx, rows []load.Row) error {
		ids, vs := make([]string, len(rows)), make([]string, len(rows))
		for i, r := range rows {
			ids[i], vs[i] = r.Key, r.Values[1].(string)
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+schema+`.orders SELECT * FROM unnest($1::text[], $2::text[])`, ids, vs)
		return err
	})
	l, err := load.New[pgx.Tx](store, w, load.Options{Scope: "orders-import", BatchSize: 50})
	if err != nil {
		t.Fatal(err)
	}
	input := func(from, to int) []string {
		var kv []string
		for i := from; i < to; i++ {
			kv = append(kv, fmt.Sprintf("o%04d=%d", i, i))
		}
		return kv
	}
	var wg sync.WaitGroup
	sums := make([]load.Summary, 4)
	errs := make([]error, 4)
	for i := range sums {
		src := pairs(t, input(i*100, i*100+200)...) // four loads; the second half of each overlaps the next
		wg.Add(1)
		go func() {
			defer wg.Done()
			sums[i], errs[i] = l.Run(ctx, src)
		}()
	}
	wg.Wait()
	total := 0
	for i := range sums {
		if errs[i] != nil || sums[i].Conflict != 0 || sums[i].New+sums[i].Duplicate != 200 {
			t.Errorf("load %d: %v, %v", i, sums[i], errs[i])
		}
		total += sums[i].New
	}
	var rows, distinct int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT id) FROM `+schema+`.orders`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != 500 || distinct != 500 || total != 500 {
		t.Errorf("%d rows (%d distinct), %d new: want every one of the 500 once", rows, distinct, total)
	}
	sum, err := l.Run(ctx, pairs(t, "o0001=changed", "o9999=new"))
	if !errors.Is(err, idem.ErrConflict) || sum.New != 1 || sum.Conflict != 1 || sum.Conflicts[0].Key != "o0001" {
		t.Errorf("changed row: %v, %v", sum, err)
	}
}
