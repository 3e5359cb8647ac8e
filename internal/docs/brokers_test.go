package docs

import (
	"context"
	"database/sql"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/broker/kafka"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/broker/redisstream"
	"github.com/idemgo/idem/broker/servicebus"
	sqsidem "github.com/idemgo/idem/broker/sqs"
	"github.com/idemgo/idem/store/postgres"
)

// The broker guides' consumers (docs/brokers/*.md), compiled: one shape in
// every adapter — NewGuard (scope: the consumer's identity), Handle or
// HandleTx, Consume (or NewConsumer + Run), and the producer helper
// (Publish or Send).

func readmeKafka(ctx context.Context, pgStore *postgres.Store, addr string, id string, amount int64) error {
	// block: kafka
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
	// block end
	return err
}

func readmeNATS(ctx context.Context, store idem.Store, js jetstream.JetStream, cons jetstream.Consumer, send func(context.Context, string, []byte) error) error {
	// block: nats
	g, err := natsidem.NewGuard(store, cons, idem.Options{}) // scope: the durable consumer's name
	if err != nil {
		return err
	}
	h := natsidem.Handle(func(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
		return nil, send(ctx, idem.DeriveKey(ctx, "mail"), msg.Data()) // two-phase: a side effect outside the database
	})
	err = natsidem.Consume(ctx, cons, g, h, natsidem.Options{JetStream: js, DeadLetterSubject: "orders.dlq"})
	// block end
	return err
}

func readmeAMQP(ctx context.Context, store idem.Store, ch *amqp.Channel) error {
	// block: amqp
	g, err := amqpidem.NewGuard(store, "orders", idem.Options{}) // scope: the queue
	if err != nil {
		return err
	}
	h := amqpidem.HandleTx(func(ctx context.Context, tx *sql.Tx, d amqp.Delivery) ([]byte, error) {
		_, err := tx.ExecContext(ctx, `insert into charges(order_id, body) values (?, ?)`, d.MessageId, d.Body)
		return nil, err
	})
	err = amqpidem.Consume(ctx, ch, g, h, amqpidem.Options{Queue: "orders", DeadLetterExchange: "orders.dlx"})
	// block end
	return err
}

func readmeServiceBus(ctx context.Context, store idem.Store, client *azservicebus.Client) error {
	// block: servicebus
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
	err = servicebus.Consume(ctx, r, g, h, servicebus.Options{EntityPath: "orders"}) // MaxDeliveries: the entity's MaxDeliveryCount
	// block end
	return err
}

func readmeRedisStream(ctx context.Context, store idem.Store, rdb *redis.Client, host string, order []byte, send func(context.Context, string, []byte) error) error {
	// block: redisstream
	// The producer: XADD with the order id in the Idem-Id field, the consumers' key.
	if _, err := redisstream.Publish(ctx, rdb, "orders", "order-1042", order); err != nil {
		return err
	}
	g, err := redisstream.NewGuard(store, "orders", "billing", idem.Options{}) // scope: the stream and the group
	if err != nil {
		return err
	}
	h := redisstream.Handle(func(ctx context.Context, m *redisstream.Message) ([]byte, error) {
		return nil, send(ctx, idem.DeriveKey(ctx, "mail"), redisstream.MessageOf(m).Payload)
	})
	err = redisstream.Consume(ctx, rdb, g, h, redisstream.Options{Stream: "orders", Group: "billing", Consumer: host, DeadLetterStream: "orders.dlq"})
	// block end
	return err
}

func readmeSQS(ctx context.Context, store idem.Store, client *sqs.Client, order string) error {
	// block: sqs
	queue, dlq := "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo", "https://sqs.eu-west-1.amazonaws.com/123456789012/orders-dlq.fifo"
	// The producer: the order id in the Idem-Id attribute; on a FIFO queue a deduplication id from the id and the content.
	_, err := sqsidem.Send(ctx, client, "order-1042", &sqs.SendMessageInput{QueueUrl: aws.String(queue), MessageBody: aws.String(order), MessageGroupId: aws.String("customer-7")})
	if err != nil {
		return err
	}
	g, err := sqsidem.NewGuard(store, queue, idem.Options{}) // scope: the queue's name
	if err != nil {
		return err
	}
	h := sqsidem.HandleTx(func(ctx context.Context, tx *sql.Tx, m *types.Message) ([]byte, error) {
		_, err := tx.ExecContext(ctx, `insert into charges(order_id, body) values (?, ?)`, sqsidem.MessageOf(m).ID, aws.ToString(m.Body))
		return nil, err
	})
	err = sqsidem.Consume(ctx, client, g, h, sqsidem.Options{QueueURL: queue, DeadLetterQueueURL: dlq})
	// block end
	return err
}

var _ = []any{readmeKafka, readmeNATS, readmeAMQP, readmeServiceBus, readmeRedisStream, readmeSQS}
