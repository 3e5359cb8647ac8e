package integration_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/store/sqlite"
)

// Stream checkpoints, run on an in-process cluster and SQLite: three
// deposits arrive, one of them sent twice; the consumer applies each once
// and stops; a fourth arrives, and the next consumer starts from the
// stored position and applies only that one.
func Example_streamCheckpoints() {
	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "ledger"), kfake.SeedTopics(1, "ledger.dlq"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	deposit := func(id string, cents int) {
		rec := kafka.Record("ledger", "alice", id, []byte(strconv.Itoa(cents)))
		if err := producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
			log.Fatal(err)
		}
	}

	dir, err := os.MkdirTemp("", "ledger")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(filepath.Join(dir, "ledger.db"), sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	cp := kafka.Checkpoints{} // keys marked too: a re-sent deposit is a duplicate
	for _, err := range []error{
		store.Migrate(ctx),
		cp.Migrate(ctx, store),
		exec(ctx, store.DB(), `create table balances (account text primary key, cents integer not null)`),
		exec(ctx, store.DB(), `insert into balances values ('alice', 0)`),
	} {
		if err != nil {
			log.Fatal(err)
		}
	}
	h := kafka.HandleCheckpoint(cp, func(ctx context.Context, tx *sql.Tx, rec *kgo.Record) error {
		_, err := tx.ExecContext(ctx, `update balances set cents = cents + ? where account = ?`, string(rec.Value), string(rec.Key))
		return err
	})

	// consume runs a consumer until it has settled n records.
	consume := func(n int) {
		cl, err := kgo.NewClient(kafka.ClientOptions(
			kgo.SeedBrokers(cluster.ListenAddrs()...),
			kgo.ConsumerGroup("balances"),
			kgo.ConsumeTopics("ledger"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		)...)
		if err != nil {
			log.Fatal(err)
		}
		defer cl.Close()
		g, err := kafka.NewGuard(store, cl, idem.Options{})
		if err != nil {
			log.Fatal(err)
		}
		ctx, stop := context.WithCancel(ctx)
		settled := make(chan broker.Report, n)
		c, err := kafka.NewConsumer(cl, g, h, kafka.Options{Hooks: broker.Hooks[*kgo.Record]{AfterSettle: func(_ context.Context, _ *kgo.Record, r broker.Report) { settled <- r }}, DeadLetterTopic: "ledger.dlq"})
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			for range n {
				r := <-settled
				fmt.Println(r.Result.Outcome, r.Action)
			}
			stop()
		}()
		if err := c.Run(ctx); err != nil {
			log.Fatal(err)
		}
	}

	deposit("d-1", 100)
	deposit("d-2", 250)
	deposit("d-1", 100) // sent again by the producer
	consume(3)
	deposit("d-3", 40)
	consume(1)

	var cents int
	if err := store.DB().QueryRowContext(ctx, `select cents from balances where account = 'alice'`).Scan(&cents); err != nil {
		log.Fatal(err)
	}
	pos, err := cp.Positions(ctx, store, "balances", "ledger")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("alice:", cents, "cents; ledger/0 resumes at offset", pos[0])
	// Output:
	// processed ack
	// processed ack
	// duplicate ack
	// processed ack
	// alice: 390 cents; ledger/0 resumes at offset 4
}

func exec(ctx context.Context, db *sql.DB, query string) error {
	_, err := db.ExecContext(ctx, query)
	return err
}
