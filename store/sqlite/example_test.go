package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/sqlite"
)

// The two-phase guard on SQLite: for side effects outside the database (here
// a pretend e-mail). The redelivered message is skipped and gets the
// recorded result back.
func Example_twoPhase() {
	dir, err := os.MkdirTemp("", "idem-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	store, err := sqlite.Open(filepath.Join(dir, "idem.db"), sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	g, err := idem.New(store, idem.Options{Scope: "mailer"})
	if err != nil {
		log.Fatal(err)
	}
	msg := idem.Message{ID: "welcome-42", Payload: []byte(`{"user":42}`)}
	for range 2 { // the broker delivers it twice
		res, err := g.Do(ctx, msg, func(ctx context.Context) ([]byte, error) {
			fmt.Println("sending the welcome e-mail")
			return []byte("mail-id-7"), nil
		})
		fmt.Println(res.Outcome, string(res.Value), err, idem.Decide(res, err))
	}
	// Output:
	// sending the welcome e-mail
	// processed mail-id-7 <nil> ack
	// duplicate mail-id-7 <nil> ack
}

// The transactional inbox on SQLite: the charge and the dedup marker commit
// in one transaction, so a redelivered order is never charged twice.
func Example_transactionalInbox() {
	dir, err := os.MkdirTemp("", "idem-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	store, err := sqlite.Open(filepath.Join(dir, "shop.db"), sqlite.Options{Table: "idem_inbox"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	db := store.DB()
	if _, err := db.ExecContext(ctx, `CREATE TABLE charges (order_id TEXT NOT NULL, amount INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	g, err := idem.New(store, idem.Options{Scope: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	deliveries := []idem.Message{
		{ID: "order-1", Payload: []byte("1500")},
		{ID: "order-2", Payload: []byte("700")},
		{ID: "order-1", Payload: []byte("1500")}, // redelivered
	}
	for _, msg := range deliveries {
		res, err := idem.DoTx(ctx, g, msg, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			_, err := tx.ExecContext(ctx, `INSERT INTO charges (order_id, amount) VALUES (?, ?)`, msg.ID, string(msg.Payload))
			return nil, err
		})
		fmt.Println(msg.ID, res.Outcome, err)
	}

	var n, total int
	if err := db.QueryRowContext(ctx, `SELECT count(*), sum(amount) FROM charges`).Scan(&n, &total); err != nil {
		log.Fatal(err)
	}
	fmt.Println("charges:", n, "total:", total)
	// Output:
	// order-1 processed <nil>
	// order-2 processed <nil>
	// order-1 duplicate <nil>
	// charges: 2 total: 2200
}
