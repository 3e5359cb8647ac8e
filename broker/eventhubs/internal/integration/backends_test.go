package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/eventhubs"
	"github.com/idemgo/idem/broker/eventhubs/checkpointstore"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/mysql"
	"github.com/idemgo/idem/store/sqlite"
)

// cpBackend is one business database holding idem's records, the
// checkpoint store's tables and an effects table with no unique
// constraint, so that an effect applied twice shows as two rows.
type cpBackend struct {
	store                          idem.Store
	cps                            *checkpointstore.Store
	ownership, checkpoints, effect string // the tables' names
	// handler is HandleCheckpoint inserting the event's effect row, after
	// each (when not nil).
	handler func(each func()) eventhubs.Handler
	// query returns the one integer q selects; exec runs q.
	query func(ctx context.Context, q string) (int, error)
	exec  func(ctx context.Context, q string) error
}

// cpBackends are the databases the checkpoint store runs on: SQLite
// (always), PostgreSQL and MariaDB (testenv: skipped when absent, failed
// under IDEM_REQUIRE_SERVICES=1).
var cpBackends = []struct {
	name string
	open func(t testing.TB) *cpBackend
}{
	{"sqlite", openSQLiteBackend},
	{"postgres", func(t testing.TB) *cpBackend { return openPG(t).backend() }},
	{"mysql", openMySQLBackend},
}

// eachBackend runs f on every backend, each in a subtest of its own.
func eachBackend(t *testing.T, f func(t *testing.T, b *cpBackend)) {
	for _, bc := range cpBackends {
		t.Run(bc.name, func(t *testing.T) { f(t, bc.open(t)) })
	}
}

func (b *cpBackend) count(t testing.TB, q string) int {
	t.Helper()
	n, err := b.query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// checkOnce fails t unless n distinct ids have one effect row each.
func (b *cpBackend) checkOnce(t *testing.T, n int) {
	t.Helper()
	rows := b.count(t, `SELECT count(*) FROM `+b.effect)
	distinct := b.count(t, `SELECT count(DISTINCT id) FROM `+b.effect)
	if rows != n || distinct != n {
		t.Fatalf("%d effect rows of %d ids, want %d of %d", rows, distinct, n, n)
	}
}

// backend is the PostgreSQL backend as a cpBackend.
func (b *pgBackend) backend() *cpBackend {
	return &cpBackend{
		store: b.store, cps: b.cps, ownership: b.schema + ".ownership", checkpoints: b.schema + ".checkpoints", effect: b.effects,
		handler: func(each func()) eventhubs.Handler { return b.handler(each) },
		query: func(ctx context.Context, q string) (n int, err error) {
			err = b.pool.QueryRow(ctx, q).Scan(&n)
			return n, err
		},
		exec: func(ctx context.Context, q string) error {
			_, err := b.pool.Exec(ctx, q)
			return err
		},
	}
}

// handler is HandleCheckpoint inserting the event's effect row, after
// each (when not nil).
func (b *pgBackend) handler(each func()) eventhubs.Handler {
	return eventhubs.HandleCheckpoint(func(ctx context.Context, tx pgx.Tx, ev *azeventhubs.ReceivedEventData) error {
		if each != nil {
			each()
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+b.effects+` (id) VALUES ($1)`, eventhubs.MessageOf(ev).ID)
		return err
	})
}

func openSQLiteBackend(t testing.TB) *cpBackend {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "business.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return sqlBackend(t, st, st.DB(), `CREATE TABLE effects (id TEXT NOT NULL)`)
}

func openMySQLBackend(t testing.TB) *cpBackend {
	cfg, err := gomysql.ParseDSN(testenv.MySQL.Need(t))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	dbName := "idem_eh_" + suffix(t)
	if _, err := admin.Exec("CREATE DATABASE `" + dbName + "`"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec("DROP DATABASE `" + dbName + "`"); err != nil {
			t.Errorf("drop database %s: %v", dbName, err)
		}
	})
	cfg.DBName = dbName
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(16)
	t.Cleanup(func() { db.Close() })
	st, err := mysql.New(db, mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return sqlBackend(t, st, db, "CREATE TABLE effects (id VARCHAR(200) NOT NULL) ENGINE = InnoDB")
}

// sqlBackend is the *sql.Tx backend over db, whose store is st.
type migrator interface {
	idem.Store
	Migrate(ctx context.Context) error
}

func sqlBackend(t testing.TB, st migrator, db *sql.DB, effectsDDL string) *cpBackend {
	ctx := context.Background()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	cps, err := checkpointstore.New(st, checkpointstore.Options{OwnershipTable: "ownership", CheckpointTable: "checkpoints"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cps.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, effectsDDL); err != nil {
		t.Fatal(err)
	}
	return &cpBackend{
		store: st, cps: cps, ownership: "ownership", checkpoints: "checkpoints", effect: "effects",
		handler: func(each func()) eventhubs.Handler {
			return eventhubs.HandleCheckpoint(func(ctx context.Context, tx *sql.Tx, ev *azeventhubs.ReceivedEventData) error {
				if each != nil {
					each()
				}
				_, err := tx.ExecContext(ctx, `INSERT INTO effects (id) VALUES (?)`, eventhubs.MessageOf(ev).ID)
				return err
			})
		},
		query: func(ctx context.Context, q string) (n int, err error) {
			err = db.QueryRowContext(ctx, q).Scan(&n)
			return n, err
		},
		exec: func(ctx context.Context, q string) error {
			_, err := db.ExecContext(ctx, q)
			return err
		},
	}
}

// TestCheckpointStoreSQLiteReservedNames: on *sql.Tx, a table named like
// SQLite's own (sqlite_…) is refused, as a name that is not an identifier.
func TestCheckpointStoreSQLiteReservedNames(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "business.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, o := range []checkpointstore.Options{{OwnershipTable: "sqlite_owners"}, {CheckpointTable: "main.SQLITE_cp"}, {CheckpointTable: "1x"}} {
		if _, err := checkpointstore.New(st, o); !errors.Is(err, checkpointstore.ErrInvalidTable) || !errors.Is(err, idem.ErrInvalidOptions) {
			t.Errorf("%+v: %v, want ErrInvalidTable", o, err)
		}
	}
	if _, err := checkpointstore.New(st, checkpointstore.Options{OwnershipTable: "main.owners"}); err != nil {
		t.Errorf("a qualified name: %v", err)
	}
}
