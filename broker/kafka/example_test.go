package kafka_test

import (
	"context"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/store/memory"
)

// A two-phase consumer: the handler calls a service outside the store and
// passes it a key derived from the record's, so the service deduplicates a
// repeat too. The guard holds the scope (the consumer group) and the key
// (the idempotency-key header, through MessageOf).
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	cl, err := kgo.NewClient(kafka.ClientOptions(
		kgo.SeedBrokers("localhost:9092"),
		kgo.ConsumerGroup("mailer"),
		kgo.ConsumeTopics("signups"),
	)...)
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close() // after Run has returned

	g, err := kafka.NewGuard(memory.New(), cl, idem.Options{}) // scope: the group, "mailer"
	if err != nil {
		log.Fatal(err)
	}
	h := kafka.Handle(func(ctx context.Context, rec *kgo.Record) ([]byte, error) {
		return nil, sendWelcomeMail(ctx, idem.DeriveKey(ctx, "welcome-mail"), rec.Value)
	})
	c, err := kafka.NewConsumer(cl, g, h, kafka.Options{Hooks: broker.Hooks[*kgo.Record]{
		OnDeadLetter: func(ctx context.Context, rec *kgo.Record, r broker.Report) {
			slog.Error("signup dead-lettered", "reason", r.Reason, "err", r.Err, "offset", rec.Offset)
		},
	}, DeadLetterTopic: "signups.dlq",
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

func sendWelcomeMail(ctx context.Context, idempotencyKey string, body []byte) error { return nil }

// A transactional inbox: the charge and the dedup marker commit together in
// PostgreSQL (a store/postgres Store, whose transactions are pgx.Tx). The
// key is the CloudEvent's source and id, set on the guard.
func ExampleHandleTx() {
	ctx := context.Background()
	var store idem.Store // postgres.New(pool, postgres.Options{}) on a pgxpool.Pool
	cl, err := kgo.NewClient(kafka.ClientOptions(
		kgo.SeedBrokers("localhost:9092"),
		kgo.ConsumerGroup("billing"),
		kgo.ConsumeTopics("orders"),
	)...)
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	g, err := kafka.NewGuard(store, cl, idem.Options{Key: idem.CloudEventsKey}) // ce_source + ce_id
	if err != nil {
		log.Fatal(err)
	}
	h := kafka.HandleTx(func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) ([]byte, error) {
		_, err := tx.Exec(ctx, `insert into charges(order_id, body) values ($1, $2)`, rec.Key, rec.Value)
		return nil, err
	})
	if err := kafka.Consume(ctx, cl, g, h, kafka.Options{DeadLetterTopic: "orders.dlq"}); err != nil {
		log.Fatal(err)
	}
}

// Producing: a stable id per logical message, sent again unchanged on a
// retry.
func ExampleRecord() {
	cl, err := kgo.NewClient(kgo.SeedBrokers("localhost:9092")) // idempotent writes are on by default
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	rec := kafka.Record("orders", "customer-7", "order-42", []byte(`{"amount":500}`),
		kafka.WithCloudEvent("/shop/checkout", "order.placed"))
	if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		log.Fatal(err)
	}
}

// Replaying dead letters: each one read back from the dead-letter topic
// goes back to its original topic with its original headers, where the
// consumer's record decides (a duplicate if the key was completed
// meanwhile, processed if not).
func ExampleReplay() {
	ctx := context.Background()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers("localhost:9092"),
		kgo.ConsumeTopics("orders.dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	fs := cl.PollFetches(ctx)
	for _, dl := range fs.Records() {
		if kafka.MessageOf(dl).Header(idem.HeaderReason) == "conflict" {
			continue // another content holds the key: an operator decides
		}
		if err := kafka.Replay(ctx, cl, dl); err != nil {
			log.Fatal(err)
		}
	}
}

// Azure Event Hubs through its Kafka endpoint: SASL PLAIN over TLS on port
// 9093, user "$ConnectionString", the namespace's connection string as
// password.
func Example_eventHubs() {
	connString := os.Getenv("EVENTHUBS_CONNECTION_STRING")
	cl, err := kgo.NewClient(kafka.ClientOptions(
		kgo.SeedBrokers("my-namespace.servicebus.windows.net:9093"),
		kgo.DialTLS(),
		kgo.SASL(plain.Auth{User: "$ConnectionString", Pass: connString}.AsMechanism()),
		kgo.ConsumerGroup("billing"),
		kgo.ConsumeTopics("orders"), // the event hub
	)...)
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	g, err := kafka.NewGuard(memory.New(), cl, idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	h := kafka.Handle(func(ctx context.Context, rec *kgo.Record) ([]byte, error) { return nil, nil })
	_ = kafka.Consume(context.Background(), cl, g, h, kafka.Options{DeadLetterTopic: "orders-dlq"})
}
