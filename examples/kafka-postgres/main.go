// Command kafka-postgres is a Kafka consumer that charges orders, with the
// dedup marker in the same PostgreSQL transaction as the charge: an order
// delivered twice is charged once, and an order id reused with other content
// goes to the dead-letter topic.
//
//	KAFKA_BROKERS=localhost:9092 IDEM_POSTGRES_URL=postgres://localhost/shop go run .
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/store/postgres"
)

// config is what the program needs from its environment.
type config struct {
	Brokers     []string
	PostgresURL string
	Topic       string // orders
	DeadLetter  string // conflicts and permanent failures
	Group       string // the consumer group, and so the dedup scope
	Logger      *slog.Logger
	ClientOpts  []kgo.Opt // extra client settings (the test shortens waits)
}

// order is the message the shop's checkout publishes.
type order struct {
	ID          string `json:"id"`
	AmountCents int64  `json:"amount_cents"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := config{
		Brokers:     strings.Split(getenv("KAFKA_BROKERS", "localhost:9092"), ","),
		PostgresURL: getenv("IDEM_POSTGRES_URL", "postgres://localhost:5432/postgres"),
		Topic:       "orders",
		DeadLetter:  "orders.dlq",
		Group:       "billing",
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if err := run(ctx, cfg); err != nil {
		log.Fatal(err)
	}
}

// run consumes orders until ctx ends.
func run(ctx context.Context, cfg config) error {
	pool, err := pgxpool.New(ctx, cfg.PostgresURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	// The business table. No unique constraint on order_id: the inbox is
	// what keeps an order from being charged twice.
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS charges (
		id bigserial PRIMARY KEY,
		order_id text NOT NULL,
		amount_cents bigint NOT NULL,
		charged_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("create charges: %w", err)
	}
	inbox, err := postgres.New(pool, postgres.Options{Table: "idem_inbox"})
	if err != nil {
		return err
	}
	if err := inbox.Migrate(ctx); err != nil { // idempotent, safe from every instance
		return err
	}
	// One sweeper per process deletes expired markers; instances take turns.
	// It stops with run: cancel first, then wait for it.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { _ = (&idem.Sweeper{Store: inbox}).Run(ctx) })

	cl, err := kgo.NewClient(kafka.ClientOptions(append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, cfg.ClientOpts...)...)...)
	if err != nil {
		return err
	}
	defer cl.Close() // after Consume has returned: closing leaves the group

	// The guard holds the scope and the key: the scope is the consumer
	// group, the key the idempotency-key header (the producer's stable
	// order id), which MessageOf reads as the message id.
	g, err := kafka.NewGuard(inbox, cl, idem.Options{
		Observer: idem.NewSlogObserver(cfg.Logger),
	})
	if err != nil {
		return err
	}

	// The charge and the dedup marker commit together, or neither does. The
	// offset is committed only after that commit.
	charge := kafka.HandleTx(func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) ([]byte, error) {
		var o order
		if err := json.Unmarshal(rec.Value, &o); err != nil {
			return nil, idem.Permanent(fmt.Errorf("decode order: %w", err)) // retrying will not fix it
		}
		if o.AmountCents <= 0 {
			return nil, idem.Permanent(errors.New("order without a positive amount"))
		}
		_, err := tx.Exec(ctx, `INSERT INTO charges (order_id, amount_cents) VALUES ($1, $2)`, o.ID, o.AmountCents)
		return nil, err
	})
	return kafka.Consume(ctx, cl, g, charge, kafka.Options{
		DeadLetterTopic: cfg.DeadLetter,
		Hooks: broker.Hooks[*kgo.Record]{
			OnDeadLetter: func(_ context.Context, rec *kgo.Record, r broker.Report) {
				// The place to alert: a conflict is an order id reused with other content.
				cfg.Logger.Error("order dead-lettered", "reason", r.Reason, "err", r.Err, "offset", rec.Offset)
			},
		},
	})
}

// sendOrder is the producer's side: the record carries the order id as its
// idempotency key, the same on every send of that order.
func sendOrder(ctx context.Context, cl *kgo.Client, topic string, o order) error {
	value, err := json.Marshal(o)
	if err != nil {
		return err
	}
	return cl.ProduceSync(ctx, kafka.Record(topic, o.ID, o.ID, value)).FirstErr()
}

func getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
