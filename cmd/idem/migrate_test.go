package main

import (
	"context"
	"strings"
	"testing"

	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// migrate --check on each SQL store: whole after migrate (exit 0); with the
// records table dropped and its bookkeeping left, a line per missing object
// and exit 1, nothing changed; migrate makes the table again.
func TestMigrateCheck(t *testing.T) {
	for _, name := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(name, func(t *testing.T) {
			d := operatorStores[name](t)
			if code, out, errs := runCmd(t, "migrate", "--store", d); code != exitOK {
				t.Fatalf("migrate: %d %s %s", code, out, errs)
			}
			if code, out, errs := runCmd(t, "migrate", "--check", "--store", d); code != exitOK || !strings.Contains(out, "whole") {
				t.Fatalf("migrate --check after migrate: exit %d\n%s%s", code, out, errs)
			}
			ctx := context.Background()
			h, err := dsn.Open(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			table := strings.TrimPrefix(h.Where, "table ")
			switch {
			case h.SQL != nil:
				_, err = h.SQL.ExecContext(ctx, "DROP TABLE "+table)
			case h.PG != nil:
				_, err = h.PG.Exec(ctx, "DROP TABLE "+table)
			}
			h.Close()
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // --check changes nothing: the second run finds the same
				code, out, errs := runCmd(t, "migrate", "--check", "--store", d)
				if code != exitFailure || !strings.Contains(out, "missing: table ") || !strings.Contains(out, "missing: index ") {
					t.Fatalf("migrate --check without the table: exit %d, want 1 and a line per missing object\n%s%s", code, out, errs)
				}
			}
			if code, out, errs := runCmd(t, "migrate", "--store", d); code != exitOK {
				t.Fatalf("migrate over the dropped table: %d %s %s", code, out, errs)
			}
			if code, out, errs := runCmd(t, "migrate", "--check", "--store", d); code != exitOK {
				t.Fatalf("migrate --check after the second migrate: exit %d\n%s%s", code, out, errs)
			}
		})
	}
}
