package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/cmd/idem/internal/dsn"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/outbox"
	outboxmysql "github.com/idemgo/idem/outbox/mysql"
	outboxpostgres "github.com/idemgo/idem/outbox/postgres"
	outboxsqlite "github.com/idemgo/idem/outbox/sqlite"

	_ "modernc.org/sqlite"
)

// outboxFixture is an outbox with one published message (a), one parked
// (b, which holds back c in key k) and one pending (c), in a table of the
// test's own; dsn and table name it for the commands.
type outboxFixture struct {
	dsn, table string
}

// fill writes the fixture's messages through s, whose transactions enqueue
// runs.
func fill(t *testing.T, s outbox.Store, enqueue func(ctx context.Context, msgs ...outbox.Message) error) {
	t.Helper()
	ctx := context.Background()
	err := enqueue(ctx,
		outbox.Message{ID: "a", Destination: "orders", Payload: []byte("1")},
		outbox.Message{ID: "b", Destination: "orders", OrderingKey: "k", Payload: []byte("2")},
		outbox.Message{ID: "c", Destination: "mail", OrderingKey: "k", Payload: []byte("3")},
	)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := s.Fetch(ctx, outbox.FetchRequest{Now: time.Now(), Limit: 10})
	if err != nil || len(recs) != 3 {
		t.Fatalf("fetch: %d, %v", len(recs), err)
	}
	if err := s.MarkPublished(ctx, []int64{recs[0].Seq}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkFailed(ctx, []outbox.Failure{{Seq: recs[1].Seq, Attempts: 1, NextAttemptAt: time.Now(), Error: "message too large", Park: true}}); err != nil {
		t.Fatal(err)
	}
}

// inSQLTx runs enqueue in a transaction of db.
func inSQLTx(db *sql.DB, enqueue func(context.Context, *sql.Tx, ...outbox.Message) error) func(context.Context, ...outbox.Message) error {
	return func(ctx context.Context, msgs ...outbox.Message) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := enqueue(ctx, tx, msgs...); err != nil {
			return err
		}
		return tx.Commit()
	}
}

var outboxFixtures = map[string]func(t *testing.T) outboxFixture{
	"sqlite": func(t *testing.T) outboxFixture {
		path := filepath.Join(t.TempDir(), "app.db")
		db, err := sql.Open("sqlite", path+"?_txlock=immediate&_busy_timeout=5000")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		s, err := outboxsqlite.New(db, outboxsqlite.Options{Table: "app_outbox"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		fill(t, s, inSQLTx(db, s.Enqueue))
		return outboxFixture{"sqlite://" + filepath.ToSlash(path), "app_outbox"}
	},
	"postgres": func(t *testing.T) outboxFixture {
		addr := testenv.Postgres.Need(t)
		table := uniqueName("outbox_cli")
		pool, err := pgxpool.New(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s, err := outboxpostgres.New(pool, outboxpostgres.Options{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pool.Exec(context.Background(), "DROP TABLE "+table+", "+table+"_lease") })
		fill(t, s, func(ctx context.Context, msgs ...outbox.Message) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return s.Enqueue(ctx, tx, msgs...) })
		})
		return outboxFixture{addr, table}
	},
	"mysql": func(t *testing.T) outboxFixture {
		addr := testenv.MySQL.Need(t)
		cfg, err := gomysql.ParseDSN(addr)
		if err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		table := uniqueName("outbox_cli")
		s, err := outboxmysql.New(db, outboxmysql.Options{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			db.Exec("DROP TABLE `" + table + "`, `" + table + "_lease`, `" + table + "_keys`")
		})
		fill(t, s, inSQLTx(db, s.Enqueue))
		u, err := dsn.MySQLURL(addr)
		if err != nil {
			t.Fatal(err)
		}
		return outboxFixture{u, table}
	},
}

func TestOutboxCommands(t *testing.T) {
	t.Setenv("IDEM_STORE", "")
	for name, newFixture := range outboxFixtures {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			at := []string{"--store", f.dsn, "--table", f.table}
			outboxCmd := func(args ...string) (int, string, string) {
				t.Helper()
				return runCmd(t, append(append([]string{"outbox"}, args...), at...)...)
			}
			code, out, errOut := outboxCmd("stats", "--json")
			if code != 0 {
				t.Fatalf("stats: exit %d: %s", code, errOut)
			}
			st := decode(t, out)
			if st["pending"] != 1.0 || st["parked"] != 1.0 || st["published"] != 1.0 || st["oldest_pending"] == nil {
				t.Fatalf("stats %v", st)
			}
			code, out, errOut = outboxCmd("stats")
			if code != 0 || !strings.Contains(out, "parked     1") || !strings.Contains(out, "idem outbox retry --all") {
				t.Fatalf("stats: exit %d:\n%s%s", code, out, errOut)
			}
			code, out, errOut = outboxCmd("list", "--state", "parked", "--json")
			if code != 0 {
				t.Fatalf("list: exit %d: %s", code, errOut)
			}
			msgs := decode(t, out)["messages"].([]any)
			if len(msgs) != 1 || msgs[0].(map[string]any)["id"] != "b" || msgs[0].(map[string]any)["last_error"] != "message too large" {
				t.Fatalf("parked: %v", msgs)
			}
			code, out, _ = outboxCmd("list", "--limit", "2")
			if code != 0 || !strings.Contains(out, "published") || !strings.Contains(out, "next page: --after") {
				t.Fatalf("list page:\n%s", out)
			}
			code, out, errOut = outboxCmd("retry", "--all")
			if code != 0 || !strings.Contains(out, "1 made pending again") {
				t.Fatalf("retry: exit %d:\n%s%s", code, out, errOut)
			}
			if _, out, _ = outboxCmd("stats", "--json"); decode(t, out)["pending"] != 2.0 {
				t.Fatalf("stats after retry: %s", out)
			}
			if code, out, _ = outboxCmd("retry", "--all"); code != 0 || !strings.Contains(out, "No parked messages") {
				t.Fatalf("retry with none parked:\n%s", out)
			}
			// Mistakes: usage errors, and a table that is not there.
			for _, bad := range [][]string{{"retry"}, {"retry", "--all", "7"}, {"retry", "x"}, {"list", "--state", "done"}} {
				if code, _, errOut := outboxCmd(bad...); code != exitUsage {
					t.Errorf("%v: exit %d, want %d: %s", bad, code, exitUsage, errOut)
				}
			}
			code, _, errOut = runCmd(t, "outbox", "stats", "--store", f.dsn, "--table", "no_such_outbox")
			if code != exitFailure || !strings.Contains(errOut, "is --table right?") {
				t.Errorf("a missing table: exit %d: %s", code, errOut)
			}
		})
	}
}

func TestOutboxNeedsASQLStore(t *testing.T) {
	t.Setenv("IDEM_STORE", "")
	code, _, errOut := runCmd(t, "outbox", "stats", "--store", fmt.Sprintf("memory://outbox-%d", time.Now().UnixNano()))
	if code != exitUsage || !strings.Contains(errOut, "has no outbox") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}
