package integration_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/entity/entitypgx"
	"github.com/idemgo/idem/load"
	"github.com/idemgo/idem/load/loadpgx"
)

// A CSV file loaded into a table that keeps each row's key (its primary
// key, order_id) and fingerprint (load_fp):
//
//	CREATE TABLE orders (order_id bigint PRIMARY KEY, customer text, amount_cents bigint, load_fp text)
func Example_loadpgx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	f, err := os.Open("orders.csv") // order_id,customer,amount_cents
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	src, err := load.NewCSV(f, load.CSVOptions{Key: []string{"order_id"}})
	if err != nil {
		log.Fatal(err)
	}
	orders := &loadpgx.Table{Name: "orders", KeyColumn: "order_id", FingerprintColumn: "load_fp", Columns: src.Header()}
	l, err := load.New(entitypgx.NewStore(pool), orders, load.Options{
		Scope:    "orders-import",
		Progress: load.Terminal(os.Stderr),
	})
	if err != nil {
		log.Fatal(err)
	}
	sum, err := l.Run(ctx, src)
	if errors.Is(err, idem.ErrConflict) {
		for _, c := range sum.Conflicts {
			log.Print(c) // row 7 (line 8): key 42 exists with other content (...)
		}
	} else if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sum) // 1000 rows in 1.2s: 998 new, 0 duplicate, 2 conflict
}
