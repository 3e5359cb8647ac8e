package outboxenv

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem/internal/pgtest"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/outbox"
	outboxmemory "github.com/idemgo/idem/outbox/memory"
	outboxmysql "github.com/idemgo/idem/outbox/mysql"
	"github.com/idemgo/idem/outbox/outboxtest"
	outboxpostgres "github.com/idemgo/idem/outbox/postgres"
	outboxsqlite "github.com/idemgo/idem/outbox/sqlite"
	"github.com/idemgo/idem/store/sqlite"
)

// Stores are the outbox stores on each database, by name.
var Stores = []struct {
	Name string
	New  outboxtest.NewSubject
}{
	{"SQLite", SQLite},
	{"PostgreSQL", Postgres},
	{"MariaDB", MySQL},
}

// Memory is an in-memory outbox.
func Memory(t *testing.T, clock func() time.Time) outboxtest.Subject {
	s, err := outboxmemory.New(outboxmemory.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return outboxtest.Subject{Store: s, InTx: func(ctx context.Context, fn func(context.Context, outboxtest.Enqueue) error) error {
		return s.InTx(ctx, func(ctx context.Context, tx *outboxmemory.Tx) error {
			return fn(ctx, func(ctx context.Context, msgs ...outbox.Message) error { return s.Enqueue(ctx, tx, msgs...) })
		})
	}}
}

// SQLite is an outbox in a database file of the test's own, beside an
// idem inbox (store/sqlite), written in the inbox's transactions.
func SQLite(t *testing.T, clock func() time.Time) outboxtest.Subject {
	inbox, err := sqlite.Open(filepath.Join(t.TempDir(), "app.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inbox.Close() })
	s, err := outboxsqlite.New(inbox.DB(), outboxsqlite.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return outboxtest.Subject{Store: s, SerialWriters: true, InTx: func(ctx context.Context, fn func(context.Context, outboxtest.Enqueue) error) error {
		return inbox.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			return fn(ctx, func(ctx context.Context, msgs ...outbox.Message) error { return s.Enqueue(ctx, tx, msgs...) })
		})
	}}
}

// Postgres is an outbox in a schema of the test's own.
func Postgres(t *testing.T, clock func() time.Time) outboxtest.Subject {
	pool, _, _ := pgtest.Schema(t, "outbox")
	s, err := outboxpostgres.New(pool, outboxpostgres.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return outboxtest.Subject{Store: s, InTx: func(ctx context.Context, fn func(context.Context, outboxtest.Enqueue) error) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return fn(ctx, func(ctx context.Context, msgs ...outbox.Message) error { return s.Enqueue(ctx, tx, msgs...) })
		})
	}}
}

// MySQLDB opens the database testenv names with the driver options given:
// interpolated or server-side prepared statements, affected rows counted
// as changed or as found rows.
func MySQLDB(t testing.TB, interpolate, foundRows bool) *sql.DB {
	t.Helper()
	cfg, err := gomysql.ParseDSN(testenv.MySQL.Need(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.InterpolateParams, cfg.ClientFoundRows = interpolate, foundRows
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	return db
}

// MySQLStore is a migrated outbox on db, on tables of the test's own
// (opts.Table is replaced), dropped at the end.
func MySQLStore(t testing.TB, db *sql.DB, opts outboxmysql.Options) *outboxmysql.Store {
	t.Helper()
	opts.Table = fmt.Sprintf("outbox_%d", time.Now().UnixNano())
	s, err := outboxmysql.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, suffix := range []string{"", "_lease", "_keys"} {
			if _, err := db.Exec("DROP TABLE IF EXISTS `" + opts.Table + suffix + "`"); err != nil {
				t.Error(err)
			}
		}
	})
	return s
}

// MySQL is an outbox on tables of the test's own in the database testenv
// names.
func MySQL(t *testing.T, clock func() time.Time) outboxtest.Subject {
	db := MySQLDB(t, true, false)
	s := MySQLStore(t, db, outboxmysql.Options{Clock: clock})
	return SQLSubject(s, db, s.Enqueue)
}

// SQLSubject is the subject for a store over db whose Enqueue writes in a
// *sql.Tx of db.
func SQLSubject(s outbox.Store, db *sql.DB, enqueue func(context.Context, *sql.Tx, ...outbox.Message) error) outboxtest.Subject {
	return outboxtest.Subject{Store: s, InTx: func(ctx context.Context, fn func(context.Context, outboxtest.Enqueue) error) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := fn(ctx, func(ctx context.Context, msgs ...outbox.Message) error { return enqueue(ctx, tx, msgs...) }); err != nil {
			return err
		}
		return tx.Commit()
	}}
}
