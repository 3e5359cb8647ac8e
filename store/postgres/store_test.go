package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/postgres"
	"github.com/idemgo/idem/store/storetest"
)

var (
	poolMu     sync.Mutex
	sharedPool *pgxpool.Pool
)

func TestMain(m *testing.M) {
	code := m.Run()
	poolMu.Lock()
	if sharedPool != nil {
		sharedPool.Close()
	}
	poolMu.Unlock()
	os.Exit(code)
}

// testPool returns the pool shared by the package's tests (one per test
// binary keeps the server's connection count low), or skips the test when
// PostgreSQL is not reachable.
func testPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	addr := testenv.Postgres.Need(t)
	poolMu.Lock()
	defer poolMu.Unlock()
	if sharedPool == nil {
		cfg, err := pgxpool.ParseConfig(addr)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 24
		p, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		sharedPool = p
	}
	return sharedPool
}

// newSchema creates a schema of its own for one test and drops it at cleanup.
func newSchema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	schema := "idem_test_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// newStore returns a migrated store on a fresh schema.
func newStore(t testing.TB, opts postgres.Options) *postgres.Store {
	t.Helper()
	pool := testPool(t)
	schema := newSchema(t, pool)
	if opts.Table == "" {
		opts.Table = schema + ".idem_records"
	} else {
		opts.Table = schema + "." + opts.Table
	}
	s, err := postgres.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) idem.Store { return newStore(t, postgres.Options{}) })
}

func TestConformanceTx(t *testing.T) {
	storetest.RunTx(t, func(t *testing.T) storetest.TxStore[pgx.Tx] { return newStore(t, postgres.Options{}) })
}

// The hash-partitioned layout runs the same suites: the statements are the
// same, and partitioning must not change a single outcome.
func TestConformancePartitioned(t *testing.T) {
	opts := postgres.Options{Partitions: 4}
	storetest.Run(t, func(t *testing.T) idem.Store { return newStore(t, opts) })
	storetest.RunTx(t, func(t *testing.T) storetest.TxStore[pgx.Tx] { return newStore(t, opts) })
}

// A server (or role) whose default isolation is REPEATABLE READ: a claim
// that meets a key committed after its snapshot gets a serialization
// failure and runs again; InTx asks for READ COMMITTED itself.
func TestConformanceRepeatableReadDefault(t *testing.T) {
	addr := testenv.Postgres.Need(t)
	cfg, err := pgxpool.ParseConfig(addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "repeatable read"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var iso string
	if err := pool.QueryRow(context.Background(), "SHOW default_transaction_isolation").Scan(&iso); err != nil || iso != "repeatable read" {
		t.Fatalf("default isolation %q, %v", iso, err)
	}
	mk := func(t *testing.T) *postgres.Store {
		schema := newSchema(t, testPool(t))
		s, err := postgres.New(pool, postgres.Options{Table: schema + ".idem_records"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	}
	storetest.Run(t, func(t *testing.T) idem.Store { return mk(t) })
	storetest.RunTx(t, func(t *testing.T) storetest.TxStore[pgx.Tx] { return mk(t) })
}

// Pools whose statements are not prepared and cached (what PgBouncer in
// transaction mode and some proxies need): the simple protocol, where pgx
// sends a batch as one multi-statement query with the arguments inlined,
// and exec mode. InTx's batched BEGIN and the deferred marker go through
// both.
func TestConformanceQueryExecModes(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			mk := modeStores(t, mode)
			storetest.Run(t, func(t *testing.T) idem.Store { return mk(t) })
			storetest.RunTx(t, func(t *testing.T) storetest.TxStore[pgx.Tx] { return mk(t) })
		})
	}
}

// modeStores returns a maker of migrated stores, each on a fresh schema,
// that share a pool (closed when t ends) whose statements run in mode, with
// MarkWithFirstStatement and the deferred marker on every DoTx.
func modeStores(t *testing.T, mode pgx.QueryExecMode) func(t *testing.T) *postgres.Store {
	cfg := testPool(t).Config()
	cfg.ConnConfig.DefaultQueryExecMode = mode
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return func(t *testing.T) *postgres.Store {
		schema := newSchema(t, testPool(t))
		s, err := postgres.New(pool, postgres.Options{Table: schema + ".idem_records", MarkWithFirstStatement: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		postgres.NeverPauseFirst(s)
		return s
	}
}

func TestConformanceInspector(t *testing.T) {
	storetest.RunInspector(t, func(t *testing.T) storetest.InspectorStore { return newStore(t, postgres.Options{}) })
}
