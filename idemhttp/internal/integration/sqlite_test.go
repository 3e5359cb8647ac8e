package integration_test

import (
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp/internal/idemhttptest"
	"github.com/idemgo/idem/store/sqlite/sqlitetest"
)

// openSQLite is a migrated SQLite store in the test's temporary directory.
func openSQLite(t testing.TB) idem.Store { return sqlitetest.Open(t) }

// TestConcurrentRequestsOnSQLite runs the middleware's behaviours under
// concurrent requests (idemhttptest.Run) on the embedded SQLite file
// store, where the claims of 100 requests race in one database file.
func TestConcurrentRequestsOnSQLite(t *testing.T) {
	idemhttptest.Run(t, openSQLite)
}

// BenchmarkMiddleware measures a first request and a retry behind the
// middleware on the SQLite store (idemhttptest.BenchMiddleware).
func BenchmarkMiddleware(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) { idemhttptest.BenchMiddleware(b, openSQLite) })
}
