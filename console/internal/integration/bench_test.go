package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/console"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/postgres"
)

// BenchmarkPostgresPages serves the console's pages from PostgreSQL tables
// of 1k and 1M records and reports each page's p50 and p99 (the issue's
// target: p99 at 1M at most twice p99 at 1k). Run it with
//
//	go test ./console/internal/integration -run '^$' -bench PostgresPages -benchtime 2000x
//
// The tables are the benchmark's own (idem_console_bench_N), loaded with one
// INSERT .. SELECT generate_series and dropped at the end (kept for the next
// run with IDEM_BENCH_KEEP=1). The records are
// spread over 10 scopes (record g in scope g mod 10); in each scope 1 in 2000
// is in progress (half of those stale), 1 in 2000 released, 1 in 100
// expired, the rest completed.
//
//   - list-first: the first page of one scope's records.
//   - list-deep: the page of one scope after a key half-way through it.
//     Both read the primary key in order; store/postgres's List starts the
//     deep one from the scope's first key (see the package's report).
//   - counts: the overview, served from the console's snapshot (recounted
//     in the background every CountsMaxAge).
//   - counts-every-view: the overview with CountsMaxAge < 0, so every view
//     runs Inspector.Stats: the store's full count.
//   - stale: the stale and parked page (a state filter: PostgreSQL's List
//     visits the key order until it has a page).
func BenchmarkPostgresPages(b *testing.B) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testenv.Postgres.Need(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	for _, n := range []int{1_000, 1_000_000} {
		table := fmt.Sprintf("idem_console_bench_%d", n)
		st, err := postgres.New(pool, postgres.Options{Table: table})
		if err != nil {
			b.Fatal(err)
		}
		load(b, pool, st, table, n)
		if os.Getenv("IDEM_BENCH_KEEP") == "" {
			b.Cleanup(func() {
				_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table+", "+table+"_migrations")
			})
		}
		mid := fmt.Sprintf("key-%08d", n/2)
		pages := []struct {
			name, path string
			maxAge     time.Duration
		}{
			{"list-first", "records?scope=scope-3", 0},
			{"list-deep", "records?" + url.Values{"scope": {"scope-3"}, "after": {idem.Record{Scope: "scope-3", ID: mid}.Cursor().String()}}.Encode(), 0},
			{"counts", "", 0},
			{"counts-every-view", "", -1},
			{"stale", "parked?scope=scope-3", 0},
		}
		for _, p := range pages {
			c := console.New(st, console.Options{CountsMaxAge: p.maxAge})
			b.Run(fmt.Sprintf("records=%d/%s", n, p.name), func(b *testing.B) {
				serve := func() {
					rr := httptest.NewRecorder()
					c.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "http://localhost/idem/"+p.path, nil))
					if rr.Code != http.StatusOK {
						b.Fatalf("%s: %d\n%s", p.path, rr.Code, rr.Body)
					}
				}
				serve() // the first view of the overview waits for its count
				lat := make([]time.Duration, 0, b.N)
				for b.Loop() {
					start := time.Now()
					serve()
					lat = append(lat, time.Since(start))
				}
				slices.Sort(lat)
				q := func(f float64) float64 {
					return float64(lat[min(len(lat)-1, int(f*float64(len(lat))))].Microseconds()) / 1000
				}
				b.ReportMetric(q(0.50), "p50-ms")
				b.ReportMetric(q(0.99), "p99-ms")
			})
			c.Close()
		}
	}
}

// load fills table with n records unless it holds them already.
func load(b *testing.B, pool *pgxpool.Pool, st *postgres.Store, table string, n int) {
	ctx := context.Background()
	if err := st.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	var have int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&have); err != nil {
		b.Fatal(err)
	}
	if have == n {
		return
	}
	start := time.Now()
	if _, err := pool.Exec(ctx, "TRUNCATE "+table); err != nil {
		b.Fatal(err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO `+table+` (token, lease_until, expires_at, sweep_at, created_at, updated_at,
		attempts, state, scope, id, fingerprint, result)
	SELECT 4294967296 + g,
		CASE WHEN (g / 10) % 4000 = 0 THEN now() + interval '1 hour' ELSE now() - interval '1 minute' END,
		e, date_trunc('second', e),
		now() - interval '2 hours', now() - interval '1 hour',
		1,
		CASE WHEN (g / 10) % 2000 = 0 THEN 1 WHEN (g / 10) % 2000 = 1 THEN 3 ELSE 2 END,
		'scope-' || (g % 10), 'key-' || lpad(g::text, 8, '0'), md5(g::text), '\x7b226f6b223a747275657d'::bytea
	FROM generate_series(1, $1::int) AS g,
		LATERAL (SELECT CASE WHEN (g / 10) % 100 = 7 THEN now() - interval '1 hour' ELSE now() + interval '7 days' END AS e) AS x`, n)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
		b.Fatal(err)
	}
	b.Logf("loaded %d records into %s in %v", n, table, time.Since(start).Round(time.Millisecond))
}
