package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/load"
	"github.com/idemgo/idem/store/sqlite"
)

// A CSV export is loaded into SQLite through the transactional inbox; the
// same file again writes nothing, and a later export that changed an order
// reports it instead of overwriting it.
func Example_markedSQLite() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "load-example")
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(filepath.Join(dir, "shop.db"), sqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}
	store.DB().ExecContext(ctx, `CREATE TABLE orders (order_id TEXT, customer TEXT, amount INTEGER)`)

	orders := load.Marked(store, func(ctx context.Context, tx *sql.Tx, rows []load.Row) error {
		for _, r := range rows { // only the rows whose keys are new
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES (?, ?, ?)`, r.Values...); err != nil {
				return err
			}
		}
		return nil
	})
	l, err := load.New[*sql.Tx](store, orders, load.Options{Scope: "orders-import"})
	if err != nil {
		panic(err)
	}
	run := func(csv string) {
		src, err := load.NewCSV(strings.NewReader(csv), load.CSVOptions{Key: []string{"order_id"}})
		if err != nil {
			panic(err)
		}
		sum, err := l.Run(ctx, src)
		fmt.Printf("%d new, %d duplicate, %d conflict\n", sum.New, sum.Duplicate, sum.Conflict)
		if errors.Is(err, idem.ErrConflict) {
			for _, c := range sum.Conflicts {
				fmt.Printf("  row %d (line %d): order %s changed\n", c.Row, c.Line, c.Key)
			}
		}
	}
	monday := "order_id,customer,amount\n42,alice,1500\n43,bob,700\n"
	run(monday)
	run(monday) // the job retried
	run("order_id,customer,amount\n43,bob,700\n44,carol,990\n42,alice,9900\n")

	var n int
	store.DB().QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&n)
	fmt.Println(n, "orders")
	// Output:
	// 2 new, 0 duplicate, 0 conflict
	// 0 new, 2 duplicate, 0 conflict
	// 1 new, 1 duplicate, 1 conflict
	//   row 3 (line 4): order 42 changed
	// 3 orders
}
