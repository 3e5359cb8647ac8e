package outboxmysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/outbox"
	outboxmysql "github.com/idemgo/idem/outbox/mysql"
	"github.com/idemgo/idem/outbox/outboxtest"
	"github.com/idemgo/idem/store/mysql"
)

// openDB opens the test server with the DSN options given.
func openDB(t testing.TB, interpolate, foundRows bool) *sql.DB {
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

// newStore returns a migrated store on tables of the test's own.
func newStore(t testing.TB, db *sql.DB, opts outboxmysql.Options) *outboxmysql.Store {
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

func inTx(s *outboxmysql.Store, db *sql.DB) func(context.Context, func(context.Context, outboxtest.Enqueue) error) error {
	return func(ctx context.Context, fn func(context.Context, outboxtest.Enqueue) error) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := fn(ctx, func(ctx context.Context, msgs ...outbox.Message) error { return s.Enqueue(ctx, tx, msgs...) }); err != nil {
			return err
		}
		return tx.Commit()
	}
}

// TestConformance runs the suite in each driver mode: interpolated or
// server-side prepared statements, affected rows as changed or as found
// rows.
func TestConformance(t *testing.T) {
	for _, m := range []struct {
		name                   string
		interpolate, foundRows bool
	}{{"Interpolated", true, false}, {"InterpolatedFoundRows", true, true}, {"Prepared", false, false}, {"PreparedFoundRows", false, true}} {
		t.Run(m.name, func(t *testing.T) {
			db := openDB(t, m.interpolate, m.foundRows)
			outboxtest.Run(t, func(t *testing.T, clock func() time.Time) outboxtest.Subject {
				s := newStore(t, db, outboxmysql.Options{Clock: clock})
				return outboxtest.Subject{Store: s, InTx: inTx(s, db)}
			})
		})
	}
}

// TestDoTx: Enqueue inside idem.DoTx on store/mysql, the inbox marker, the
// business writes and the messages in one transaction.
func TestDoTx(t *testing.T) {
	db := openDB(t, true, false)
	s := newStore(t, db, outboxmysql.Options{})
	inbox, err := mysql.New(db, mysql.Options{Table: s.Table() + "_inbox"})
	if err != nil {
		t.Fatal(err)
	}
	if err := inbox.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, suffix := range []string{"_inbox", "_inbox_migrations"} {
			db.Exec("DROP TABLE IF EXISTS `" + s.Table() + suffix + "`")
		}
	})
	g, err := idem.New(inbox, idem.Options{Scope: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	outboxtest.RunDoTx(t, g, s, s.Enqueue)
}
