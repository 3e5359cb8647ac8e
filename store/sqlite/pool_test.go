package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/sqlite"
)

// A database with a pool of one connection (SetMaxOpenConns(1), common with
// SQLite) works for Migrate, two-phase calls and the inbox: no statement
// waits for a second connection while a transaction holds the only one.
func TestPoolOfOneConnection(t *testing.T) {
	dsn, err := sqlite.DSN(filepath.Join(t.TempDir(), "one.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open(sqlite.DriverName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	s, err := sqlite.New(db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate on a pool of one: %v", err)
	}
	g, err := idem.New(s, idem.Options{Scope: "one"})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"a", "a", "b"} {
		res, err := idem.DoTx(ctx, g, idem.Message{ID: id, Payload: []byte("x")}, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			return []byte(id), nil
		})
		if err != nil {
			t.Fatalf("DoTx %d on a pool of one: %v", i, err)
		}
		if want := map[int]idem.Outcome{0: idem.OutcomeProcessed, 1: idem.OutcomeDuplicate, 2: idem.OutcomeProcessed}[i]; res.Outcome != want {
			t.Fatalf("DoTx %d: %v, want %v", i, res.Outcome, want)
		}
	}
	if res, err := g.Do(ctx, idem.Message{ID: "c", Payload: []byte("x")}, func(context.Context) ([]byte, error) { return nil, nil }); err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("Do on a pool of one: %v, %v", res.Outcome, err)
	}
}
