package integration_test

import (
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemgrpc/internal/idemgrpctest"
	"github.com/idemgo/idem/store/sqlite/sqlitetest"
)

// openSQLite is a migrated SQLite store in the test's temporary directory.
func openSQLite(t testing.TB) idem.Store { return sqlitetest.Open(t) }

// TestBehavioursOnSQLite runs the interceptors' behaviours that go through
// the store (idemgrpctest.Run) on the embedded SQLite file store, whose
// records are real rows: what idemgrpc records and replays survives the
// store's encoding and its limits.
func TestBehavioursOnSQLite(t *testing.T) {
	idemgrpctest.Run(t, openSQLite)
}

// BenchmarkUnary measures a Charge over bufconn behind the interceptor on
// the SQLite store: new keys and replays of one key (idemgrpctest.Bench).
func BenchmarkUnary(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) { idemgrpctest.Bench(b, openSQLite) })
}
