package mysql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/mysql"
	"github.com/idemgo/idem/store/storetest"
)

// dsnWith returns the test server's DSN with interpolation and found-rows
// counting set as asked, so both driver modes run the suite.
func dsnWith(t testing.TB, interpolate, foundRows bool) string {
	t.Helper()
	cfg, err := gomysql.ParseDSN(testenv.MySQL.Need(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.InterpolateParams, cfg.ClientFoundRows = interpolate, foundRows
	return cfg.FormatDSN()
}

func openDB(t testing.TB, interpolate, foundRows bool) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsnWith(t, interpolate, foundRows))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// tableName is unique per call, so concurrent and repeated runs never share
// a table.
func tableName(t testing.TB) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "idem_test_" + hex.EncodeToString(b[:])
}

// newStore makes a migrated store on its own table, dropped at cleanup.
func newStore(t testing.TB, db *sql.DB) *mysql.Store {
	t.Helper()
	s, err := mysql.New(db, mysql.Options{Table: tableName(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropStore(t, db, s.Table()) })
	return s
}

func dropStore(t testing.TB, db *sql.DB, table string) {
	t.Helper()
	for _, name := range []string{table, table + "_migrations"} {
		if _, err := db.Exec("DROP TABLE IF EXISTS `" + name + "`"); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	}
}

// TestConformance runs the store suite with interpolated statements and the
// driver's default affected-rows counting (changed rows).
func TestConformance(t *testing.T) {
	db := openDB(t, true, false)
	storetest.Run(t, func(t *testing.T) idem.Store { return newStore(t, db) })
}

// TestConformanceFoundRows runs it again with server-side prepared statements
// and clientFoundRows=true, the other driver mode the store must handle.
func TestConformanceFoundRows(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	db := openDB(t, false, true)
	storetest.Run(t, func(t *testing.T) idem.Store { return newStore(t, db) })
}

func TestConformanceTx(t *testing.T) {
	for _, mode := range []struct {
		name                   string
		interpolate, foundRows bool
	}{{"Interpolated", true, false}, {"PreparedFoundRows", false, true}} {
		t.Run(mode.name, func(t *testing.T) {
			db := openDB(t, mode.interpolate, mode.foundRows)
			storetest.RunTx(t, func(t *testing.T) storetest.TxStore[*sql.Tx] { return newStore(t, db) })
		})
	}
}

func TestConformanceInspector(t *testing.T) {
	db := openDB(t, true, false)
	storetest.RunInspector(t, func(t *testing.T) storetest.InspectorStore { return newStore(t, db) })
}
