package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/entity"
	"github.com/idemgo/idem/internal/inboxcheck"
	"github.com/idemgo/idem/internal/testenv"
)

type database struct {
	name    string
	dialect entity.Dialect
	open    func(t *testing.T) *sql.DB
	text    string // a key column type
}

var databases = []database{
	{"sqlite", entity.SQLite, func(t *testing.T) *sql.DB {
		path := filepath.Join(t.TempDir(), "entity.db")
		return open(t, "sqlite", "file:"+path+"?_txlock=immediate&_busy_timeout=10000&_journal_mode=WAL")
	}, "TEXT"},
	{"postgres", entity.Postgres, func(t *testing.T) *sql.DB {
		return open(t, "pgx", testenv.Postgres.Need(t))
	}, "TEXT"},
	{"mysql", entity.MySQL, func(t *testing.T) *sql.DB {
		return open(t, "mysql", testenv.MySQL.Need(t))
	}, "VARCHAR(100)"},
}

func open(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(20)
	t.Cleanup(func() { db.Close() })
	if err := db.Ping(); err != nil {
		t.Fatalf("%s: %v", driver, err)
	}
	return db
}

// table creates a uniquely named table and drops it at cleanup.
func table(t *testing.T, db *sql.DB, prefix, columns string) string {
	t.Helper()
	name := fmt.Sprintf("%s_%d", prefix, rand.Uint32())
	if _, err := db.Exec(fmt.Sprintf("CREATE TABLE %s (%s)", name, columns)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("DROP TABLE " + name) })
	return name
}

func inTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

func count(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestEntityInsert(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t)
			name := table(t, db, "orders", "order_id "+d.text+" PRIMARY KEY, fp "+d.text+", amount INTEGER")
			orders := &entity.Table{Dialect: d.dialect, Name: name, KeyColumn: "order_id", FingerprintColumn: "fp", Scope: "orders"}
			ctx := context.Background()
			inboxcheck.InsertRace(t, 5, 24, func(id string) error {
				return inTx(ctx, db, func(tx *sql.Tx) error {
					return orders.Insert(ctx, entity.SQL(tx), id, "fp-A", []string{"amount"}, []any{10})
				})
			})
			if n := count(t, db, name); n != 5 {
				t.Fatalf("%d rows, want 5", n)
			}
			err := inTx(ctx, db, func(tx *sql.Tx) error {
				return orders.Insert(ctx, entity.SQL(tx), "o-1", "fp-B", []string{"amount"}, []any{99})
			})
			var ce *idem.ConflictError
			if !errors.As(err, &ce) || ce.Record.Fingerprint != "fp-A" || ce.Fingerprint != "fp-B" || ce.Key.ID != "o-1" {
				t.Fatalf("conflicting insert = %v", err)
			}
		})
	}
}

func TestEntityThroughGuard(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t)
			name := table(t, db, "payments", "payment_id "+d.text+" PRIMARY KEY, fp "+d.text+", amount INTEGER")
			lines := table(t, db, "payment_lines", "payment_id "+d.text+", line INTEGER")
			payments := &entity.Table{Dialect: d.dialect, Name: name, KeyColumn: "payment_id", FingerprintColumn: "fp", Scope: "payments"}
			var counter idem.Counter
			g, err := idem.NewInbox(entity.NewStore(db, nil), idem.Options{Scope: "payments", Observer: &counter})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			// Each payment delivered four times; a second row for the same
			// message commits with the first.
			inboxcheck.Deliveries(t, g, &counter, 40, 10, func(ctx context.Context, tx *sql.Tx, id string) error {
				fp, _ := idem.PayloadFingerprint(idem.Message{Payload: []byte(id)})
				if err := payments.Insert(ctx, entity.SQL(tx), id, fp, []string{"amount"}, []any{5}); err != nil {
					return err
				}
				q := "INSERT INTO " + lines + " (payment_id, line) VALUES (?, 1)"
				if d.dialect == entity.Postgres {
					q = strings.Replace(q, "?", "$1", 1)
				}
				_, err := tx.ExecContext(ctx, q, id)
				return err
			})
			if n, l := count(t, db, name), count(t, db, lines); n != 10 || l != 10 {
				t.Fatalf("payments %d, lines %d; want 10 and 10", n, l)
			}
			res, err := idem.DoTx(ctx, g, idem.Message{ID: "p-1", Payload: []byte("p-1")}, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
				return nil, payments.Insert(ctx, entity.SQL(tx), "p-1", "other content", nil, nil)
			})
			if res.Outcome != idem.OutcomeConflict || idem.Decide(res, err) != idem.ActionDeadLetter {
				t.Fatalf("conflict through the guard = %v, %v", res.Outcome, err)
			}

			// MarkTx works in the caller's own transaction.
			err = inTx(ctx, db, func(tx *sql.Tx) error {
				res, err := idem.MarkTx(ctx, g, tx, idem.Message{ID: "p-new"})
				if err != nil || res.Outcome != idem.OutcomeProcessed {
					return fmt.Errorf("MarkTx = %v, %w", res.Outcome, err)
				}
				return payments.Insert(ctx, entity.SQL(tx), "p-new", "fp", []string{"amount"}, []any{1})
			})
			if err != nil || count(t, db, name) != 11 {
				t.Fatalf("MarkTx and insert: %v", err)
			}

			// Two-phase work on this guard would deduplicate nothing: Do,
			// DoKey and ClaimBatch refuse it and never run the handler.
			inboxcheck.Refuses(t, g, idem.Message{ID: "p-1", Payload: []byte("p-1")})
			if n := count(t, db, name); n != 11 {
				t.Fatalf("payments %d after the refused calls, want 11", n)
			}
		})
	}
}

func TestVersionGuard(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t)
			name := table(t, db, "shipments", "id "+d.text+" PRIMARY KEY, version BIGINT NOT NULL, status "+d.text)
			ships := &entity.Versioned{Dialect: d.dialect, Name: name, IDColumn: "id", VersionColumn: "version"}
			ctx := context.Background()
			const versions = 40
			order := rand.Perm(versions)
			var (
				wg                  sync.WaitGroup
				mu                  sync.Mutex
				applied, superseded int
			)
			for _, v := range order {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ver := int64(v + 1)
					err := inTx(ctx, db, func(tx *sql.Tx) error {
						return ships.Apply(ctx, entity.SQL(tx), "s-1", ver, []string{"status"}, []any{fmt.Sprintf("status-%d", ver)})
					})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						applied++
					case errors.Is(err, idem.ErrSuperseded):
						superseded++
					default:
						t.Errorf("Apply(v%d): %v", ver, err)
					}
				}()
			}
			wg.Wait()
			var ver int64
			var status string
			if err := db.QueryRow("SELECT version, status FROM "+name).Scan(&ver, &status); err != nil {
				t.Fatal(err)
			}
			if ver != versions || status != fmt.Sprintf("status-%d", versions) || applied+superseded != versions || applied < 1 {
				t.Fatalf("ended at v%d %q; applied %d superseded %d", ver, status, applied, superseded)
			}
			// Replaying the newest version is superseded too (equal is not newer).
			err := ships.Apply(ctx, entity.SQL(db), "s-1", versions, []string{"status"}, []any{"again"})
			if !errors.Is(err, idem.ErrSuperseded) {
				t.Fatalf("equal version = %v", err)
			}
		})
	}
}

func TestInvalidIdentifiers(t *testing.T) {
	bad := &entity.Table{Dialect: entity.Postgres, Name: "orders; drop", KeyColumn: "id"}
	if err := bad.Insert(context.Background(), nil, "k", "", nil, nil); !errors.Is(err, entity.ErrInvalidIdentifier) {
		t.Fatalf("bad table name = %v", err)
	}
	ok := &entity.Table{Dialect: entity.Postgres, Name: "orders", KeyColumn: "id"}
	if err := ok.Insert(context.Background(), nil, "k", "", []string{"a-b"}, []any{1}); !errors.Is(err, entity.ErrInvalidIdentifier) {
		t.Fatalf("bad column = %v", err)
	}
	if err := ok.Insert(context.Background(), nil, "", "", nil, nil); !errors.Is(err, idem.ErrNoKey) {
		t.Fatalf("empty key = %v", err)
	}
	v := &entity.Versioned{Dialect: entity.MySQL, Name: "t", IDColumn: "id", VersionColumn: "1v"}
	if err := v.Apply(context.Background(), nil, 1, 1, nil, nil); !errors.Is(err, entity.ErrInvalidIdentifier) {
		t.Fatalf("bad version column = %v", err)
	}
}
