package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/postgres"
)

// InTx's transaction begins with its first statement, whatever that is, and
// behaves like a pgx transaction: isolation, rollback, savepoints, closed
// state.
func TestInTxBehavesLikeATransaction(t *testing.T) {
	s := newStore(t, postgres.Options{})
	ctx := context.Background()
	table := s.Table()[:len(s.Table())-len(`"idem_records"`)] + `"notes"`
	if _, err := testPool(t).Exec(ctx, `CREATE TABLE `+table+` (n int)`); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		var n int
		if err := testPool(t).QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	boom := errors.New("boom")

	// A first QueryRow carries the BEGIN: the transaction is open and READ COMMITTED.
	err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var iso string
		if err := tx.QueryRow(ctx, `SHOW transaction_isolation`).Scan(&iso); err != nil {
			return err
		}
		if iso != "read committed" {
			t.Errorf("isolation %q", iso)
		}
		var inBlock bool
		if err := tx.QueryRow(ctx, `SELECT now() = statement_timestamp()`).Scan(&inBlock); err != nil {
			return err
		}
		if inBlock {
			t.Error("the second statement ran outside the first one's transaction")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	for name, first := range map[string]func(ctx context.Context, tx pgx.Tx) error{
		"Exec": func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO `+table+` VALUES (1)`)
			return err
		},
		"QueryRow": func(ctx context.Context, tx pgx.Tx) error {
			var n int
			return tx.QueryRow(ctx, `INSERT INTO `+table+` VALUES (1) RETURNING n`).Scan(&n)
		},
		"Query": func(ctx context.Context, tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `INSERT INTO `+table+` VALUES (1) RETURNING n`)
			if err != nil {
				return err
			}
			rows.Close()
			return rows.Err()
		},
	} {
		before := count()
		// Rolled back: the first statement's write is gone.
		if err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if err := first(ctx, tx); err != nil {
				return err
			}
			return boom
		}); !errors.Is(err, boom) {
			t.Fatalf("%s first, rolled back: %v", name, err)
		}
		if count() != before {
			t.Fatalf("%s first: the write survived the rollback", name)
		}
		// Committed: it stays.
		if err := s.InTx(ctx, first); err != nil {
			t.Fatalf("%s first, committed: %v", name, err)
		}
		if count() != before+1 {
			t.Fatalf("%s first: the committed write is missing", name)
		}
	}

	// Savepoints: an inner rollback keeps the outer writes.
	before := count()
	err = s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO `+table+` VALUES (2)`); err != nil {
			return err
		}
		inner, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := inner.Exec(ctx, `INSERT INTO `+table+` VALUES (3)`); err != nil {
			return err
		}
		return inner.Rollback(ctx)
	})
	if err != nil || count() != before+1 {
		t.Fatalf("savepoint: %v, %d rows added, want 1", err, count()-before)
	}

	// A statement error fails the commit; nothing is written.
	before = count()
	err = s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		tx.Exec(ctx, `INSERT INTO `+table+` VALUES (4)`)
		tx.Exec(ctx, `SELECT 1/0`)
		return nil
	})
	if !errors.Is(err, pgx.ErrTxCommitRollback) || count() != before {
		t.Fatalf("commit after a failed statement = %v", err)
	}

	// A transaction that ran nothing commits nothing; a closed one refuses work.
	var kept pgx.Tx
	if err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error { kept = tx; return nil }); err != nil {
		t.Fatalf("empty transaction: %v", err)
	}
	if _, err := kept.Exec(ctx, `SELECT 1`); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("Exec on a finished transaction = %v, want ErrTxClosed", err)
	}
	if err := kept.QueryRow(ctx, `SELECT 1`).Scan(new(int)); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("QueryRow on a finished transaction = %v, want ErrTxClosed", err)
	}

	// A panic rolls back and leaves the pool usable.
	func() {
		defer func() { _ = recover() }()
		s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			tx.Exec(ctx, `INSERT INTO `+table+` VALUES (5)`)
			panic("handler bug")
		})
	}()
	if n := count(); n != before {
		t.Fatalf("a panicking transaction left %d rows", n-before)
	}
}

// A first Query carries the BEGIN (and a deferred marker) too: its batch
// ends with its rows, whether they are closed or read to the end, and an
// error in the statement reaches the caller through the rows.
func TestInTxQueryFirst(t *testing.T) {
	f := newFirstFixture(t)
	ctx := context.Background()
	f.trips.take()
	var sum int
	err := f.s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT generate_series(1, 3)`)
		if err != nil {
			return err
		}
		for rows.Next() { // read to the end, never closed
			var n int
			if err := rows.Scan(&n); err != nil {
				return err
			}
			sum += n
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT generate_series(4, 5)`)
		if err != nil {
			return err
		}
		ns, err := pgx.CollectRows(rows, pgx.RowTo[int])
		for _, n := range ns {
			sum += n
		}
		return err
	})
	if err != nil || sum != 15 {
		t.Fatalf("sum %d, %v", sum, err)
	}
	if trips := f.trips.take(); strings.Join(trips, " ") != "BEGIN+SELECT SELECT COMMIT" {
		t.Fatalf("round trips %q", trips)
	}

	err = f.s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT 1/0`)
		if err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	})
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "22012" {
		t.Fatalf("a failing first Query = %v, want division by zero", err)
	}
}

// Statements sent on tx.Conn() are inside the transaction, as with a pgx.Tx
// of pgx's own, also when they come before any statement on tx (and before
// a deferred marker).
func TestInTxConnIsInsideTheTransaction(t *testing.T) {
	f := newFirstFixture(t)
	ctx := context.Background()
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		run  func(fn func(ctx context.Context, tx pgx.Tx) error) error
	}{
		{"InTx", func(fn func(ctx context.Context, tx pgx.Tx) error) error { return f.s.InTx(ctx, fn) }},
		{"DoTx with MarkWithFirstStatement", func(fn func(ctx context.Context, tx pgx.Tx) error) error {
			_, err := idem.DoTx(ctx, f.g, idem.Message{ID: "conn-first"}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				return nil, fn(ctx, tx)
			})
			return err
		}},
	} {
		err := tc.run(func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Conn().Exec(ctx, `INSERT INTO `+f.ledger+` (msg, amount) VALUES ('via-conn', 1)`); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if n := f.rows(t, "via-conn"); n != 0 {
			t.Fatalf("%s: a write on tx.Conn() survived the rollback", tc.name)
		}
	}
}

// A first statement with a pgx option that batches do not take (a query exec
// mode, result formats) runs as it would on a pgx.Tx of pgx's own, inside
// the transaction; pgx.NamedArgs, which batches take, still carries the
// BEGIN.
func TestInTxFirstStatementWithPgxOptions(t *testing.T) {
	f := newFirstFixture(t)
	ctx := context.Background()
	boom := errors.New("boom")
	insert := `INSERT INTO ` + f.ledger + ` (msg, amount) VALUES ($1, 1)`
	for name, first := range map[string]func(ctx context.Context, tx pgx.Tx, id string) error{
		"Exec, simple protocol": func(ctx context.Context, tx pgx.Tx, id string) error {
			_, err := tx.Exec(ctx, insert, pgx.QueryExecModeSimpleProtocol, id)
			return err
		},
		"QueryRow, exec mode": func(ctx context.Context, tx pgx.Tx, id string) error {
			var n int
			return tx.QueryRow(ctx, insert+` RETURNING amount`, pgx.QueryExecModeExec, id).Scan(&n)
		},
		"Query, result formats": func(ctx context.Context, tx pgx.Tx, id string) error {
			rows, err := tx.Query(ctx, insert+` RETURNING amount`, pgx.QueryResultFormats{pgx.TextFormatCode}, id)
			if err != nil {
				return err
			}
			rows.Close()
			return rows.Err()
		},
		"Exec, named args": func(ctx context.Context, tx pgx.Tx, id string) error {
			_, err := tx.Exec(ctx, `INSERT INTO `+f.ledger+` (msg, amount) VALUES (@id, 1)`, pgx.NamedArgs{"id": id})
			return err
		},
	} {
		id := strings.ReplaceAll(name, " ", "-")
		if err := f.s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if err := first(ctx, tx, id); err != nil {
				return err
			}
			return boom
		}); !errors.Is(err, boom) {
			t.Fatalf("%s, rolled back: %v", name, err)
		}
		if n := f.rows(t, id); n != 0 {
			t.Fatalf("%s: the write survived the rollback", name)
		}
		res, err := idem.DoTx(ctx, f.g, idem.Message{ID: id}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			return nil, first(ctx, tx, id)
		})
		if err != nil || res.Outcome != idem.OutcomeProcessed || f.rows(t, id) != 1 {
			t.Fatalf("%s in DoTx with MarkWithFirstStatement: %v, %v, %d rows", name, res.Outcome, err, f.rows(t, id))
		}
	}
}
