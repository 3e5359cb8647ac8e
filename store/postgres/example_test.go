package postgres_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/postgres"
)

// A consumer that charges orders, with the dedup marker in the same
// transaction as the charge: a redelivered order is acknowledged and skipped.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := postgres.New(pool, postgres.Options{Table: "idem_inbox"})
	if err != nil {
		log.Fatal(err) // a table name that is not an identifier: postgres.ErrInvalidTable
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	g, err := idem.New(store, idem.Options{Scope: "billing", Retention: 14 * 24 * time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	// One sweeper per process; the instances take turns.
	go (&idem.Sweeper{Store: store}).Run(ctx)

	msg := idem.Message{ID: "order-42", Payload: []byte(`{"order":42,"amount":500}`)}
	res, err := idem.DoTx(ctx, g, msg, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		_, err := tx.Exec(ctx, `INSERT INTO charges (order_id, amount) VALUES ($1, $2)`, 42, 500)
		return nil, err
	})
	switch idem.Decide(res, err) {
	case idem.ActionAck:
		// processed now, or a duplicate of an order charged before
	case idem.ActionRetry:
		// store down, or the same order in flight elsewhere: redeliver later
	case idem.ActionDeadLetter:
		log.Printf("dead-letter %s: %s", res.Key, idem.DeadLetterReason(err))
	}
}

// A Kafka poll marked in one statement and committed in one transaction
// with its business writes.
func ExampleStore_MarkBatch() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	store, _ := postgres.New(pool, postgres.Options{})
	ids := []string{"evt-1", "evt-2", "evt-3"} // the poll's message keys
	now := time.Now()
	err := store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		reqs := make([]idem.ClaimRequest, len(ids))
		for i, id := range ids {
			reqs[i] = idem.ClaimRequest{Key: idem.Key{Scope: "orders-group", ID: id}, Now: now,
				LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(7 * 24 * time.Hour)}
		}
		claims, err := store.MarkBatch(ctx, tx, reqs)
		if err != nil {
			return err
		}
		for i, c := range claims {
			switch c.Outcome {
			case idem.ClaimDuplicate:
				continue // processed before: skip
			case idem.ClaimAcquired:
				if _, err := tx.Exec(ctx, `INSERT INTO events (id) VALUES ($1)`, ids[i]); err != nil {
					return err
				}
			default: // held by a live two-phase owner: not done yet, retry the poll
				return fmt.Errorf("%s: %v", reqs[i].Key, c.Outcome)
			}
		}
		return nil
	})
	if err != nil {
		log.Print(err) // nothing committed: do not commit the offsets, poll again
	}
}
