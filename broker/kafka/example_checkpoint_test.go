package kafka_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/kafka"
)

// Stream checkpoints on PostgreSQL: each record's balance update and the
// partition's position commit in one transaction, and a restarted or
// rebalanced consumer starts from the stored position. The ledger's
// producer is the only writer and never sends an entry twice, so no
// record is kept per message (NoKeys). The store is a store/postgres
// Store, whose transactions are pgx.Tx.
func ExampleHandleCheckpoint() {
	ctx := context.Background()
	var store idem.Store // postgres.New(pool, postgres.Options{}) on a pgxpool.Pool
	cp := kafka.Checkpoints{Table: "ledger_checkpoints", NoKeys: true}
	if err := cp.Migrate(ctx, store); err != nil { // once, beside store.Migrate
		log.Fatal(err)
	}
	cl, err := kgo.NewClient(kafka.ClientOptions(
		kgo.SeedBrokers("localhost:9092"),
		kgo.ConsumerGroup("balances"),
		kgo.ConsumeTopics("ledger"),
	)...)
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	g, err := kafka.NewGuard(store, cl, idem.Options{}) // the scope, "balances", names the positions
	if err != nil {
		log.Fatal(err)
	}
	h := kafka.HandleCheckpoint(cp, func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error {
		_, err := tx.Exec(ctx, `update balances set cents = cents + $1 where account = $2`, rec.Value, rec.Key)
		return err
	})
	if err := kafka.Consume(ctx, cl, g, h, kafka.Options{DeadLetterTopic: "ledger.dlq"}); err != nil {
		log.Fatal(err)
	}
}
