package loadpgx_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/internal/testenv"
)

func testPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), testenv.Postgres.Need(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newSchema creates a schema of the test's own, dropped at its end.
func newSchema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	schema := fmt.Sprintf("loadpgx_test_%d", time.Now().UnixNano())
	if _, err := pool.Exec(context.Background(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	return schema
}
