package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/postgres"
)

func TestOptionsValidation(t *testing.T) {
	// A pool that is never used: New does not touch the database.
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tests := []struct {
		name      string
		opts      postgres.Options
		wantTable bool // ErrInvalidTable expected
		ok        bool
	}{
		{"default", postgres.Options{}, false, true},
		{"plain", postgres.Options{Table: "inbox"}, false, true},
		{"qualified", postgres.Options{Table: "billing.inbox_2"}, false, true},
		{"mixed case", postgres.Options{Table: "Billing.Inbox"}, false, true},
		{"empty part", postgres.Options{Table: "billing."}, true, false},
		{"three parts", postgres.Options{Table: "a.b.c"}, true, false},
		{"dash", postgres.Options{Table: "my-table"}, true, false},
		{"space", postgres.Options{Table: "my table"}, true, false},
		{"quote", postgres.Options{Table: `x"; drop table y; --`}, true, false},
		{"leading digit", postgres.Options{Table: "1records"}, true, false},
		{"too long", postgres.Options{Table: strings.Repeat("t", 53)}, true, false},
		{"longest", postgres.Options{Table: strings.Repeat("t", 52)}, false, true},
		{"unicode", postgres.Options{Table: "tablé"}, true, false},
		{"one partition", postgres.Options{Partitions: 1}, false, false},
		{"negative partitions", postgres.Options{Partitions: -2}, false, false},
		{"too many partitions", postgres.Options{Partitions: postgres.MaxPartitions + 1}, false, false},
		{"partitions", postgres.Options{Partitions: 16}, false, true},
		{"fillfactor low", postgres.Options{FillFactor: 5}, false, false},
		{"fillfactor high", postgres.Options{FillFactor: 101}, false, false},
		{"fillfactor", postgres.Options{FillFactor: 100}, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := postgres.New(pool, tc.opts)
			if tc.ok {
				if err != nil || s == nil {
					t.Fatalf("New(%+v) = %v", tc.opts, err)
				}
				return
			}
			var oe *postgres.OptionsError
			if err == nil || !errors.As(err, &oe) || !errors.Is(err, idem.ErrInvalidOptions) {
				t.Fatalf("New(%+v) = %v, want an *OptionsError wrapping idem.ErrInvalidOptions", tc.opts, err)
			}
			if errors.Is(err, postgres.ErrInvalidTable) != tc.wantTable {
				t.Fatalf("New(%+v) = %v; errors.Is(ErrInvalidTable) = %v, want %v", tc.opts, err, !tc.wantTable, tc.wantTable)
			}
		})
	}
	if _, err := postgres.New(nil, postgres.Options{}); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Fatalf("New(nil pool) = %v", err)
	}
}
