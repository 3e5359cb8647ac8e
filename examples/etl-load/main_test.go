package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/pgtest"
)

// writeCSV writes orders [from, to) to a file, with the amounts of the
// orders in changed altered.
func writeCSV(t *testing.T, name string, from, to int, changed ...int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("order_id,customer,amount_cents,currency\n")
	for i := from; i < to; i++ {
		amount := 100 + i
		for _, c := range changed {
			if c == i {
				amount = 1
			}
		}
		fmt.Fprintf(&b, "%d,customer-%d,%d,EUR\n", i, i%7, amount)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRun loads a CSV into PostgreSQL, loads it again (nothing new), and
// loads a file that overlaps it with two changed rows: the new orders go
// in and the two changes are reported by row and line, the stored orders
// untouched.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, schema, url := pgtest.Schema(t, "example_etl")
	base := config{PostgresURL: url, Table: schema + ".orders"}
	load := func(file string) (string, error) {
		var out, progress strings.Builder
		cfg := base
		cfg.File, cfg.Out, cfg.Progress = file, &out, &progress
		sum, err := run(ctx, cfg)
		if !strings.Contains(progress.String(), fmt.Sprintf("%d/%d rows (100.0%%)", sum.Rows, sum.Rows)) {
			t.Errorf("progress %q does not end at %d rows", progress.String(), sum.Rows)
		}
		return out.String(), err
	}

	first := writeCSV(t, "monday.csv", 1, 3001)
	out, err := load(first)
	if err != nil || !strings.Contains(out, "3000 rows in") || !strings.Contains(out, "3000 new, 0 duplicate, 0 conflict") {
		t.Fatalf("first load: %v\n%s", err, out)
	}
	out, err = load(first)
	if err != nil || !strings.Contains(out, "0 new, 3000 duplicate, 0 conflict") {
		t.Fatalf("same file again: %v\n%s", err, out)
	}
	// Tuesday's export repeats the last 1000 orders, two of them changed
	// (orders 2500 and 2990: rows 501 and 991, on lines 502 and 992).
	out, err = load(writeCSV(t, "tuesday.csv", 2000, 4001, 2500, 2990))
	if !errors.Is(err, idem.ErrConflict) || !strings.Contains(out, "1000 new, 999 duplicate, 2 conflict") {
		t.Fatalf("overlapping file: %v\n%s", err, out)
	}
	for _, want := range []string{"conflict: row 501 (line 502): key 2500 exists with other content",
		"conflict: row 991 (line 992): key 2990 exists with other content"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	var rows, amount2500 int
	if err := pool.QueryRow(ctx, `SELECT count(*), sum(amount_cents) FILTER (WHERE order_id = 2500) FROM `+base.Table).Scan(&rows, &amount2500); err != nil {
		t.Fatal(err)
	}
	if rows != 4000 || amount2500 != 2600 {
		t.Errorf("%d orders, order 2500 amount %d: want 4000 orders, each once, and the stored 2600 kept", rows, amount2500)
	}
}
