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

// openImpatient opens a pool whose sessions wait at most 1s for a row lock
// (innodb_lock_wait_timeout), so a lock wait shows up as error 1205.
func openImpatient(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsnWith(t, true, false)+"&innodb_lock_wait_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// sameTable returns a store on db over s's table.
func sameTable(t testing.TB, db *sql.DB, s *mysql.Store) *mysql.Store {
	t.Helper()
	s2, err := mysql.New(db, mysql.Options{Table: s.Table()})
	if err != nil {
		t.Fatal(err)
	}
	return s2
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

// modes are the driver configurations the store must work under:
// interpolated or server-side prepared statements, and affected rows counted
// as changed rows (the default) or as found rows (clientFoundRows=true).
var modes = []struct {
	name                   string
	interpolate, foundRows bool
}{
	{"Interpolated", true, false},
	{"InterpolatedFoundRows", true, true},
	{"Prepared", false, false},
	{"PreparedFoundRows", false, true},
}

// eachMode runs fn once per driver mode, on a pool opened in that mode.
func eachMode(t *testing.T, fn func(t *testing.T, db *sql.DB)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { fn(t, openDB(t, m.interpolate, m.foundRows)) })
	}
}

// TestConformance runs the store suite in every driver mode: clientFoundRows
// off and on, with interpolated and with prepared statements.
func TestConformance(t *testing.T) {
	eachMode(t, func(t *testing.T, db *sql.DB) {
		storetest.Run(t, func(t *testing.T) idem.Store { return newStore(t, db) })
	})
}

func TestConformanceTx(t *testing.T) {
	eachMode(t, func(t *testing.T, db *sql.DB) {
		storetest.RunTx(t, func(t *testing.T) storetest.TxStore[*sql.Tx] { return newStore(t, db) })
	})
}

func TestConformanceInspector(t *testing.T) {
	eachMode(t, func(t *testing.T, db *sql.DB) {
		storetest.RunInspector(t, func(t *testing.T) storetest.InspectorStore { return newStore(t, db) })
	})
}
