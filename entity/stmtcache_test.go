package entity

import (
	"errors"
	"testing"
)

func TestStmtKeyIsUnambiguous(t *testing.T) {
	pairs := [][2][]string{
		{{"ab", "c"}, {"a", "bc"}},
		{{"a", ""}, {"a"}},
		{{"1:a"}, {"a"}},
		{{"a\x00b"}, {"a", "b"}},
	}
	for _, p := range pairs {
		if stmtKey(p[0]...) == stmtKey(p[1]...) {
			t.Errorf("stmtKey(%q) == stmtKey(%q)", p[0], p[1])
		}
	}
}

// A statement is built once per table and column list; a bad list fails
// every time and is never cached; tables differing only in one name get
// their own statements.
func TestStatementsCached(t *testing.T) {
	orders := &Table{Dialect: Postgres, Name: "cache_orders", KeyColumn: "id", FingerprintColumn: "fp"}
	a, err := orders.insertStmt([]string{"amount"})
	if err != nil {
		t.Fatal(err)
	}
	want := `INSERT INTO "cache_orders" ("id", "amount", "fp") VALUES ($1, $2, $3) ON CONFLICT ("id") DO NOTHING`
	if a != want {
		t.Fatalf("statement\n%s\nwant\n%s", a, want)
	}
	before := stmtCount.Load()
	if b, _ := orders.insertStmt([]string{"amount"}); b != a || stmtCount.Load() != before {
		t.Fatalf("second build: %q, cache grew from %d to %d", b, before, stmtCount.Load())
	}
	for range 2 {
		if _, err := orders.insertStmt([]string{"amount;drop"}); !errors.Is(err, ErrInvalidIdentifier) {
			t.Fatalf("bad column: %v", err)
		}
	}
	if stmtCount.Load() != before {
		t.Fatal("a failed build was cached")
	}
	mysql := *orders
	mysql.Dialect = MySQL
	if b, _ := mysql.insertStmt([]string{"amount"}); b == a {
		t.Fatalf("MySQL table got the Postgres statement %q", b)
	}
	ships := &Versioned{Dialect: SQLite, Name: "cache_ships", IDColumn: "id", VersionColumn: "v"}
	s1, err := ships.applyStmt([]string{"status"})
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := ships.applyStmt([]string{"status"})
	if s1 != s2 {
		t.Fatalf("apply statements differ: %q, %q", s1, s2)
	}
	if _, err := (&Versioned{Dialect: SQLite, Name: "cache ships", IDColumn: "id", VersionColumn: "v"}).applyStmt(nil); !errors.Is(err, ErrInvalidIdentifier) {
		t.Fatalf("bad table name: %v", err)
	}
}
