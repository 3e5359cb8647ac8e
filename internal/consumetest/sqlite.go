package consumetest

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/idemgo/idem/store/sqlite"
)

// ChargesDB opens a migrated SQLite store in a temporary directory with a
// charges table written by Charge, for tests of the transactional inbox
// through a broker. The store is closed when the test ends.
func ChargesDB(t testing.TB) *sqlite.Store {
	t.Helper()
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "billing.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ctx := context.Background()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// No unique constraint: a second charge must be visible, not rejected.
	if _, err := store.DB().ExecContext(ctx, `create table charges (order_id text not null, amount integer not null)`); err != nil {
		t.Fatal(err)
	}
	return store
}

// ChargeBody is the payload Charge reads: {"amount":n}.
func ChargeBody(amount int) []byte { return fmt.Appendf(nil, `{"amount":%d}`, amount) }

// Charge inserts a charge row for order id inside tx, with the amount read
// from body (ChargeBody).
func Charge(ctx context.Context, tx *sql.Tx, id string, body []byte) error {
	var n int
	if _, err := fmt.Sscanf(string(body), `{"amount":%d}`, &n); err != nil {
		return fmt.Errorf("charge %s: body %q: %w", id, body, err)
	}
	_, err := tx.ExecContext(ctx, `insert into charges(order_id, amount) values (?, ?)`, id, n)
	return err
}

// ChargedOnce fails t unless the charges table of store holds exactly one
// row for each of unique orders.
func ChargedOnce(t testing.TB, store *sqlite.Store, unique int) {
	t.Helper()
	var rows, distinct int
	if err := store.DB().QueryRowContext(context.Background(), `select count(*), count(distinct order_id) from charges`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != unique || distinct != unique {
		t.Fatalf("%d charge rows for %d orders, want %d each", rows, distinct, unique)
	}
}
