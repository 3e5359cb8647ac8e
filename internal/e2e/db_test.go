package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/internal/pgtest"
	"github.com/idemgo/idem/store/postgres"
)

// poolConns is the connection pool of every side: as many connections as
// workers, so that neither side waits for a connection.
const poolConns = workers

// db is one benchmark's PostgreSQL schema: the business table both sides
// write one row per message to, and idem's store, emptied before each run.
type db struct {
	pool  *pgxpool.Pool
	store *postgres.Store
	// first is the same store with Options.MarkWithFirstStatement: the
	// marker goes out with BEGIN and the handler's first statement.
	first *postgres.Store
}

func newDB(t testing.TB) *db {
	t.Helper()
	setup, _, url := pgtest.Schema(t, "e2e")
	ctx := context.Background()
	if _, err := setup.Exec(ctx, `CREATE TABLE orders (
	id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	msg_id text NOT NULL,
	body   bytea NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = poolConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // before pgtest drops the schema
	store, err := postgres.New(pool, postgres.Options{Table: "idem_records"})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	first, err := postgres.New(pool, postgres.Options{Table: "idem_records", MarkWithFirstStatement: true})
	if err != nil {
		t.Fatal(err)
	}
	return &db{pool: pool, store: store, first: first}
}

// reset empties the business table and the store, and warms every
// connection of the pool, so that a run starts from the same state
// whichever side ran before.
func (d *db) reset(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := d.pool.Exec(ctx, `TRUNCATE orders, idem_records`); err != nil {
		t.Fatal(err)
	}
	conns := make([]*pgxpool.Conn, 0, poolConns)
	for range poolConns {
		c, err := d.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

// execer is what the business write needs: a transaction (pgx.Tx) or the
// pool itself (one statement in its own transaction).
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// insert is the business write: one row per message.
func insert(ctx context.Context, ex execer, msgID string, body []byte) error {
	_, err := ex.Exec(ctx, `INSERT INTO orders (msg_id, body) VALUES ($1, $2)`, msgID, body)
	return err
}

// insertTx is what a hand-written consumer does for each message: the
// business write in a transaction of its own (pgx.BeginFunc: BEGIN, the
// insert, COMMIT).
func (d *db) insertTx(ctx context.Context, msgID string, body []byte) error {
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error { return insert(ctx, tx, msgID, body) })
}

// check fails t unless the business table holds exactly one row for each
// of n distinct messages, and the store a record for each when marked is
// set.
func (d *db) check(t testing.TB, n int, marked bool) {
	t.Helper()
	ctx := context.Background()
	var rows, ids, records int
	if err := d.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT msg_id) FROM orders`).Scan(&rows, &ids); err != nil {
		t.Fatal(err)
	}
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM idem_records`).Scan(&records); err != nil {
		t.Fatal(err)
	}
	if rows != n || ids != n {
		t.Errorf("business rows = %d for %d distinct messages, want %d of %d", rows, ids, n, n)
	}
	if want := map[bool]int{true: n, false: 0}[marked]; records != want {
		t.Errorf("idem records = %d, want %d", records, want)
	}
}
