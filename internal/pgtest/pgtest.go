// Package pgtest gives integration tests a PostgreSQL schema of their own
// on the server that testenv.Postgres names (skipping, or failing under
// IDEM_REQUIRE_SERVICES=1, when it does not answer).
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/internal/testenv"
)

// Schema creates a schema named prefix_<nanoseconds>, dropped with all it
// holds when the test ends, and returns a pool whose connections use it
// (their search_path), with its name and the pool's URL.
func Schema(t testing.TB, prefix string) (pool *pgxpool.Pool, schema, url string) {
	t.Helper()
	base := testenv.Postgres.Need(t)
	ctx := context.Background()
	schema = fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	exec(t, base, "CREATE SCHEMA "+schema)
	t.Cleanup(func() { exec(t, base, "DROP SCHEMA "+schema+" CASCADE") })
	url = URL(t, base, schema)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // before the drop: cleanups run last first
	return pool, schema, url
}

// URL returns base with its connections' search_path set to schema.
func URL(t testing.TB, base, schema string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema) // pgx sends unknown parameters as run-time settings
	u.RawQuery = q.Encode()
	return u.String()
}

func exec(t testing.TB, base, stmt string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, stmt); err != nil {
		t.Error(err)
	}
}
