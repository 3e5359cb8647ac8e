package main

import (
	"context"
	"database/sql"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/broker/kafka"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/broker/servicebus"
	"github.com/idemgo/idem/store/postgres"
)

// The README's broker consumers, compiled (see readme_test.go): one shape
// in every adapter — NewGuard (scope: the consumer's identity), Handle or
// HandleTx, Consume (or NewConsumer + Run), Options.Hooks.

func readmeKafka(ctx context.Context, pgStore *postgres.Store, addr string, id string, amount int64) error {
	// README: kafka
	cl, err := kgo.NewClient(kafka.ClientOptions(kgo.SeedBrokers(addr), kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"))...)
	if err != nil {
		return err
	}
	g, err := kafka.NewGuard(pgStore, cl, idem.Options{}) // scope: the consumer group; key: the idempotency-key header
	if err != nil {
		return err
	}
	h := kafka.HandleTx(func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) ([]byte, error) {
		_, err := tx.Exec(ctx, `insert into charges(order_id, amount) values ($1, $2)`, id, amount)
		return nil, err
	})
	err = kafka.Consume(ctx, cl, g, h, kafka.Options{DeadLetterTopic: "orders.dlq"}) // or NewConsumer + Run
	// README end
	return err
}

func readmeNATS(ctx context.Context, store idem.Store, js jetstream.JetStream, cons jetstream.Consumer, send func(context.Context, string, []byte) error) error {
	// README: nats
	g, err := natsidem.NewGuard(store, cons, idem.Options{}) // scope: the durable consumer's name
	if err != nil {
		return err
	}
	h := natsidem.Handle(func(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
		return nil, send(ctx, idem.DeriveKey(ctx, "mail"), msg.Data()) // two-phase: a side effect outside the database
	})
	err = natsidem.Consume(ctx, cons, g, h, natsidem.Options{JetStream: js, DeadLetterSubject: "orders.dlq"})
	// README end
	return err
}

func readmeAMQP(ctx context.Context, store idem.Store, ch *amqp.Channel, alert func(reason string)) error {
	// README: amqp
	g, err := amqpidem.NewGuard(store, "orders", idem.Options{}) // scope: the queue
	if err != nil {
		return err
	}
	h := amqpidem.HandleTx(func(ctx context.Context, tx *sql.Tx, d amqp.Delivery) ([]byte, error) {
		_, err := tx.ExecContext(ctx, `insert into charges(order_id, body) values (?, ?)`, d.MessageId, d.Body)
		return nil, err
	})
	err = amqpidem.Consume(ctx, ch, g, h, amqpidem.Options{
		Queue: "orders", DeadLetterExchange: "orders.dlx",
		Options: amqpidem.ConsumerOptions{
			Hooks: broker.Hooks[amqp.Delivery]{OnDeadLetter: func(_ context.Context, _ amqp.Delivery, r broker.Report) { alert(r.Reason) }},
		},
	})
	// README end
	return err
}

func readmeServiceBus(ctx context.Context, store idem.Store, client *azservicebus.Client) error {
	// README: servicebus
	g, err := servicebus.NewGuard(store, servicebus.EntityPath("orders"), idem.Options{}) // scope: the entity path
	if err != nil {
		return err
	}
	r, err := client.NewReceiverForQueue("orders", nil) // PeekLock
	if err != nil {
		return err
	}
	h := servicebus.Handle(func(ctx context.Context, m *azservicebus.ReceivedMessage) ([]byte, error) {
		return nil, nil // the work; MessageID is the key
	})
	err = servicebus.Consume(ctx, r, g, h, servicebus.Options{EntityPath: "orders", Options: servicebus.ConsumerOptions{MaxDeliveries: 10}})
	// README end
	return err
}

var _ = []any{readmeKafka, readmeNATS, readmeAMQP, readmeServiceBus}
