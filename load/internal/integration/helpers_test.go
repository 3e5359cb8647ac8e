package integration_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/internal/pgtest"
)

// testDB returns a pool and a schema of the test's own.
func testDB(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	pool, schema, _ := pgtest.Schema(t, "loadpgx_test")
	return pool, schema
}
