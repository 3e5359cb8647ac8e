package integration_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/entity"
	"github.com/idemgo/idem/entity/entitypgx"
	"github.com/idemgo/idem/internal/inboxcheck"
)

// Concurrent deliveries of each order through the guard on pgx create each
// row once; a reused id with other content is a conflict; versions applied
// out of order end at the newest.
func TestEntityOnPgx(t *testing.T) {
	pool, _ := setup(t)
	ctx := context.Background()
	orders := &entity.Table{Dialect: entity.Postgres, Name: "orders", KeyColumn: "order_id", FingerprintColumn: "fp", Scope: "orders"}
	var counter idem.Counter
	g, err := idem.NewInbox(entitypgx.NewStore(pool), idem.Options{Scope: "orders", Observer: &counter})
	if err != nil {
		t.Fatal(err)
	}
	inboxcheck.Deliveries(t, g, &counter, 60, 12, func(ctx context.Context, tx pgx.Tx, id string) error {
		return orders.Insert(ctx, entitypgx.Querier(tx), id, "fp-"+id, []string{"amount"}, []any{7})
	})
	rows := func() int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := rows(); n != 12 {
		t.Fatalf("rows %d, want 12", n)
	}
	// Two-phase work on this guard would deduplicate nothing: refused,
	// the handler never runs.
	inboxcheck.Refuses(t, g, idem.Message{ID: "p-1"})
	if n := rows(); n != 12 {
		t.Fatalf("rows %d after the refused calls, want 12", n)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return orders.Insert(ctx, entitypgx.Querier(tx), "p-1", "other", nil, nil)
	})
	if !errors.Is(err, idem.ErrConflict) {
		t.Fatalf("conflicting insert = %v", err)
	}

	if _, err := pool.Exec(ctx, "CREATE TABLE ships (id text PRIMARY KEY, version bigint, status text)"); err != nil {
		t.Fatal(err)
	}
	ships := &entity.Versioned{Dialect: entity.Postgres, Name: "ships", IDColumn: "id", VersionColumn: "version"}
	for _, v := range []int64{3, 1, 5, 2, 5, 4} {
		err := ships.Apply(ctx, entitypgx.Querier(pool), "s", v, []string{"status"}, []any{fmt.Sprint("v", v)})
		if err != nil && !errors.Is(err, idem.ErrSuperseded) {
			t.Fatal(err)
		}
	}
	var status string
	if err := pool.QueryRow(ctx, "SELECT status FROM ships WHERE id = 's'").Scan(&status); err != nil || status != "v5" {
		t.Fatalf("status %q, %v", status, err)
	}
}

// entitypgx.Store is a TxStore for pgx.Tx, so idem.NewInbox and idem.DoTx take it.
var _ idem.TxStore[pgx.Tx] = (*entitypgx.Store)(nil)

// entitypgx.Store keeps no records, so it is no idem.Store: idem.New cannot
// take it (TestNewDoesNotCompileWithEntityStores builds the misuse).
func TestStoreIsNotAStore(t *testing.T) {
	var s any = entitypgx.NewStore(nil)
	if _, ok := s.(idem.Store); ok {
		t.Fatal("*entitypgx.Store is an idem.Store")
	}
	inboxcheck.NotAStore[pgx.Tx](t, s)
}

// InTx behaves like pgx.BeginFunc although its BEGIN rides with the first
// statement: a handler error or a panic rolls the insert back, a duplicate
// rolls back and acks, and a handler that runs no statement commits nothing.
func TestInTxRollsBack(t *testing.T) {
	pool, _ := setup(t)
	ctx := context.Background()
	s := entitypgx.NewStore(pool)
	orders := &entity.Table{Dialect: entity.Postgres, Name: "orders", KeyColumn: "order_id", FingerprintColumn: "fp"}
	insert := func(id string) func(ctx context.Context, tx pgx.Tx) error {
		return func(ctx context.Context, tx pgx.Tx) error {
			return orders.Insert(ctx, entitypgx.Querier(tx), id, "fp", []string{"amount"}, []any{1})
		}
	}
	exists := func(id string) bool {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM orders WHERE order_id = $1", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	boom := errors.New("boom")
	if err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if err := insert("failed")(ctx, tx); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) || exists("failed") {
		t.Fatalf("handler error: %v, row kept: %v", err, exists("failed"))
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not reach the caller")
			}
		}()
		s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if err := insert("panicked")(ctx, tx); err != nil {
				return err
			}
			panic("handler panic")
		})
	}()
	if exists("panicked") {
		t.Fatal("a panicking handler's insert committed")
	}
	if err := s.InTx(ctx, insert("kept")); err != nil || !exists("kept") {
		t.Fatalf("commit: %v, row kept: %v", err, exists("kept"))
	}
	var dup *idem.DuplicateError
	if err := s.InTx(ctx, insert("kept")); !errors.As(err, &dup) {
		t.Fatalf("second insert of one key = %v, want *idem.DuplicateError", err)
	}
	if err := s.InTx(ctx, func(context.Context, pgx.Tx) error { return nil }); err != nil {
		t.Fatalf("empty transaction: %v", err)
	}
	// Every connection is back in the pool and usable.
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}
