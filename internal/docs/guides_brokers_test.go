package docs

import (
	"context"
	"database/sql"
	"log"

	"cloud.google.com/go/pubsub/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/broker/eventhubs"
	"github.com/idemgo/idem/broker/eventhubs/checkpointstore"
	"github.com/idemgo/idem/broker/kafka"
	mqttidem "github.com/idemgo/idem/broker/mqtt"
	natsidem "github.com/idemgo/idem/broker/nats"
	pubsubidem "github.com/idemgo/idem/broker/pubsub"
	"github.com/idemgo/idem/broker/redisstream"
	"github.com/idemgo/idem/broker/servicebus"
	sqsidem "github.com/idemgo/idem/broker/sqs"
	watermillidem "github.com/idemgo/idem/broker/watermill"
	"github.com/idemgo/idem/store/postgres"
	"github.com/idemgo/idem/store/sqlite"
)

// The broker guides' blocks (docs/brokers/*.md), compiled: for each
// adapter, the producer, the mode its consume block (brokers_test.go) does
// not show, and an operator's replay of a dead letter.

func sendReceipt(ctx context.Context, key string, order []byte) error { return nil }

func helloWorld(ctx context.Context, js jetstream.JetStream) error {
	// block: hello
	store, err := sqlite.Open("idem.db", sqlite.Options{}) // or postgres, mysql, redis, mongo, cosmos
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	cons, err := js.Consumer(ctx, "ORDERS", "billing") // a durable consumer of your stream
	if err != nil {
		return err
	}
	g, err := natsidem.NewGuard(store, cons, idem.Options{}) // scope: the durable's name; key: the Idem-Id header
	if err != nil {
		return err
	}
	h := natsidem.Handle(func(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
		// Once per order, however often JetStream delivers it; the derived key lets the mail API drop our own retries.
		return nil, sendReceipt(ctx, idem.DeriveKey(ctx, "receipt"), msg.Data())
	})
	return natsidem.Consume(ctx, cons, g, h, natsidem.Options{JetStream: js, DeadLetterSubject: "orders.dlq"})
	// block end
}

func guideNATS(ctx context.Context, js jetstream.JetStream, order []byte, dead jetstream.Msg) (natsidem.Handler, error) {
	// block: nats-produce
	// The order id in Idem-Id; Nats-Msg-Id = idem.DedupID(id, content): JetStream's window drops a retry, never a conflict.
	if _, err := natsidem.Publish(ctx, js, "orders.created", "order-1042", order); err != nil {
		return natsidem.Handler{}, err
	}
	// block end
	// block: nats-tx
	h := natsidem.HandleTx(func(ctx context.Context, tx pgx.Tx, msg jetstream.Msg) ([]byte, error) {
		_, err := tx.Exec(ctx, `insert into charges(order_id, body) values ($1, $2)`, natsidem.MessageOf(msg).ID, msg.Data())
		return nil, err
	})
	// block end
	// block: nats-replay
	// dead: a message read from the dead-letter stream (what idem dlq replay does).
	dl, err := natsidem.DeadLetterOf(dead)
	if err != nil {
		return natsidem.Handler{}, err // not one of idem's dead letters
	}
	log.Printf("replaying %s: %s", dl.ID, dl.Headers[idem.HeaderReason])
	err = natsidem.Replay(ctx, js, dead) // back to its subject, under a dedup id of its own
	// block end
	return h, err
}

func guideAMQP(ctx context.Context, ch *amqp.Channel, order []byte, dead amqp.Delivery) (amqpidem.Handler, error) {
	// block: amqp-produce
	// MessageId = the order id; with the deduplication plugin, x-deduplication-header = idem.DedupID(id, content).
	err := amqpidem.Publish(ctx, ch, "orders", "orders.created", "order-1042", amqp.Publishing{Body: order})
	// block end
	if err != nil {
		return amqpidem.Handler{}, err
	}
	// block: amqp-two-phase
	h := amqpidem.Handle(func(ctx context.Context, d amqp.Delivery) ([]byte, error) {
		return nil, sendReceipt(ctx, idem.DeriveKey(ctx, "receipt"), d.Body)
	})
	// block end
	// block: amqp-replay
	// dead: a delivery from the dead-letter queue; Replay publishes it to its origin, then you ack it.
	if err := amqpidem.Replay(ctx, ch, dead); err != nil {
		return amqpidem.Handler{}, err
	}
	err = dead.Ack(false)
	// block end
	return h, err
}

func guideKafka(ctx context.Context, cl *kgo.Client, pgStore *postgres.Store, order []byte, dead *kgo.Record) (kafka.Handler, error) {
	// block: kafka-produce
	// Record key customer-7 (the partition), the order id in the idempotency-key header.
	if err := kafka.Publish(ctx, cl, "orders", "customer-7", "order-1042", order); err != nil {
		return kafka.Handler{}, err
	}
	// block end
	// block: kafka-two-phase
	h := kafka.Handle(func(ctx context.Context, rec *kgo.Record) ([]byte, error) {
		return nil, sendReceipt(ctx, idem.DeriveKey(ctx, "receipt"), rec.Value)
	})
	// block end
	// block: kafka-checkpoint
	// The partition's position in the business database, moved in the effects' transaction.
	cp := kafka.Checkpoints{Table: "ledger_checkpoints", NoKeys: true} // NoKeys: the position alone
	if err := cp.Migrate(ctx, pgStore); err != nil {                   // once, beside the store's Migrate
		return kafka.Handler{}, err
	}
	hcp := kafka.HandleCheckpoint(cp, func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error {
		_, err := tx.Exec(ctx, `update balances set cents = cents + $1 where account = $2`, rec.Value, rec.Key)
		return err
	})
	// block end
	_ = hcp
	// block: kafka-replay
	// dead: a record of the dead-letter topic; the topic keeps it, and a second replay is a duplicate.
	err := kafka.Replay(ctx, cl, dead)
	// block end
	return h, err
}

func guideServiceBus(ctx context.Context, sender *azservicebus.Sender, order []byte, dead *azservicebus.ReceivedMessage) (servicebus.Handler, error) {
	// block: servicebus-produce
	// Idem-Id = the order id; MessageID = idem.DedupID(id, content), for the entity's duplicate detection.
	if err := servicebus.Send(ctx, sender, "order-1042", &azservicebus.Message{Body: order}); err != nil {
		return servicebus.Handler{}, err
	}
	// block end
	// block: servicebus-tx
	h := servicebus.HandleTx(func(ctx context.Context, tx *sql.Tx, m *azservicebus.ReceivedMessage) ([]byte, error) {
		_, err := tx.ExecContext(ctx, `insert into charges(order_id, body) values (?, ?)`, servicebus.MessageOf(m).ID, m.Body)
		return nil, err
	})
	// block end
	// block: servicebus-replay
	// dead: received from the entity's $DeadLetterQueue; Replay sends it back, then you complete it there.
	err := servicebus.Replay(ctx, sender, dead)
	// block end
	return h, err
}

func guideSQS(ctx context.Context, client *sqs.Client, queue string, dead *types.Message) (sqsidem.Handler, error) {
	// block: sqs-two-phase
	h := sqsidem.Handle(func(ctx context.Context, m *types.Message) ([]byte, error) {
		return nil, sendReceipt(ctx, idem.DeriveKey(ctx, "receipt"), []byte(aws.ToString(m.Body)))
	})
	// block end
	// block: sqs-replay
	// dead: received from the dead-letter queue; Replay sends it to its origin queue and deletes it.
	err := sqsidem.Replay(ctx, client, dead)
	// block end
	return h, err
}

func guidePubSub(ctx context.Context, client *pubsub.Client, store idem.Store, order []byte, dead *pubsub.Message) error {
	// block: pubsub
	// The producer: the order id in the Idem-Id attribute (Pub/Sub's message id changes with every publish).
	orders := client.Publisher("orders")
	if _, err := pubsubidem.Publish(ctx, orders, "order-1042", &pubsub.Message{Data: order}).Get(ctx); err != nil {
		return err
	}
	sub := client.Subscriber("orders-billing")
	g, err := pubsubidem.NewGuard(store, sub, idem.Options{}) // scope: the subscription
	if err != nil {
		return err
	}
	h := pubsubidem.Handle(func(ctx context.Context, m *pubsubidem.Message) ([]byte, error) {
		return nil, sendReceipt(ctx, idem.DeriveKey(ctx, "receipt"), m.Data)
	})
	err = pubsubidem.Consume(ctx, sub, g, h, pubsubidem.Options{DeadLetter: client.Publisher("orders-dlq")})
	// block end
	if err != nil {
		return err
	}
	// block: pubsub-tx
	htx := pubsubidem.HandleTx(func(ctx context.Context, tx *sql.Tx, m *pubsubidem.Message) ([]byte, error) {
		_, err := tx.ExecContext(ctx, `insert into charges(order_id, body) values (?, ?)`, pubsubidem.MessageOf(m).ID, m.Data)
		return nil, err
	})
	// block end
	_ = htx
	// block: pubsub-replay
	// dead: pulled from a subscription of the dead-letter topic; ack it once Replay returns.
	if err := pubsubidem.Replay(ctx, orders, dead); err != nil {
		return err
	}
	dead.Ack()
	// block end
	return nil
}

func guideRedisStream(ctx context.Context, rdb *redis.Client, dead redis.XMessage) (redisstream.Handler, error) {
	// block: redisstream-tx
	h := redisstream.HandleTx(func(ctx context.Context, tx *sql.Tx, m *redisstream.Message) ([]byte, error) {
		msg := redisstream.MessageOf(m)
		_, err := tx.ExecContext(ctx, `insert into charges(order_id, body) values (?, ?)`, msg.ID, msg.Payload)
		return nil, err
	})
	// block end
	// block: redisstream-replay
	// dead: an entry of the dead-letter stream; Replay XADDs it to its stream and deletes it.
	err := redisstream.Replay(ctx, rdb, "orders.dlq", dead)
	// block end
	return h, err
}

func guideMQTT(ctx context.Context, store idem.Store, cm *autopaho.ConnectionManager, reading []byte, dead *paho.Publish) error {
	// block: mqtt
	// The producer: QoS 1 at least, the reading's id in the idem-id user property.
	if _, err := mqttidem.Publish(ctx, cm, "reading-7-1042", &paho.Publish{Topic: "sensors/7/readings", Payload: reading}); err != nil {
		return err
	}
	opts := mqttidem.Options{
		Server:          "mqtt://127.0.0.1:1883",
		ClientID:        "ingest-1",                         // one per process: the persistent session's name
		Topic:           "$share/ingest/sensors/+/readings", // a shared subscription: the group's processes share it
		DeadLetterTopic: "dlq/sensors",
	}
	g, err := mqttidem.NewGuard(store, opts.Topic, opts.ClientID, idem.Options{}) // scope: the shared subscription
	if err != nil {
		return err
	}
	h := mqttidem.Handle(func(ctx context.Context, m *mqttidem.Message) ([]byte, error) {
		return nil, sendReceipt(ctx, idem.DeriveKey(ctx, "store"), m.Payload)
	})
	err = mqttidem.Consume(ctx, g, h, opts) // it connects itself (autopaho), clean start false
	// block end
	if err != nil {
		return err
	}
	// block: mqtt-tx
	htx := mqttidem.HandleTx(func(ctx context.Context, tx *sql.Tx, m *mqttidem.Message) ([]byte, error) {
		_, err := tx.ExecContext(ctx, `insert into readings(id, body) values (?, ?)`, mqttidem.MessageOf(m).ID, m.Payload)
		return nil, err
	})
	// block end
	_ = htx
	// block: mqtt-replay
	// dead: a message of the dead-letter topic, read through a persistent session (idem dlq's is idem-dlq).
	err = mqttidem.Replay(ctx, cm, dead)
	// block end
	return err
}

func guideWatermill(ctx context.Context, store idem.Store, pubSub interface {
	message.Publisher
	message.Subscriber
}, order []byte, dead *message.Message) error {
	// block: watermill
	// The producer: Idem-Id = the order id, the UUID a version-8 UUID of idem.DedupID(id, content).
	if err := watermillidem.Publish(ctx, pubSub, "orders", "order-1042", message.NewMessage("", order)); err != nil {
		return err
	}
	g, err := watermillidem.NewGuard(store, "billing", idem.Options{}) // scope: the handler's name
	if err != nil {
		return err
	}
	mw, err := watermillidem.New(g, watermillidem.Options{Publisher: pubSub, PoisonTopic: "orders.poison"})
	if err != nil {
		return err
	}
	defer mw.Close()
	h := watermillidem.Handle(mw, func(msg *message.Message) ([]*message.Message, error) {
		receipt := message.NewMessage(idem.DeriveKey(msg.Context(), "receipt"), msg.Payload)
		return []*message.Message{receipt}, nil // published only once the claim is held; a duplicate produces nothing
	})
	router, err := message.NewRouter(message.RouterConfig{}, nil)
	if err != nil {
		return err
	}
	router.AddHandler("billing", "orders", pubSub, "receipts", pubSub, h) // the router is the consumer
	err = router.Run(ctx)
	// block end
	if err != nil {
		return err
	}
	// block: watermill-tx
	htx, err := watermillidem.HandleTx(mw, func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
		_, err := tx.ExecContext(ctx, `insert into charges(order_id, body) values (?, ?)`, watermillidem.MessageOf(msg).ID, msg.Payload)
		return nil, err
	})
	// block end
	_ = htx
	if err != nil {
		return err
	}
	// block: watermill-replay
	// dead: a message of the poison topic; Replay publishes it to its origin topic under a UUID of its own.
	err = watermillidem.Replay(ctx, pubSub, dead)
	// block end
	return err
}

func guideEventHubs(ctx context.Context, store idem.Store, p *azeventhubs.Processor, orders, dlq *azeventhubs.ProducerClient, order []byte, dead *azeventhubs.ReceivedEventData) error {
	// block: eventhubs-produce
	// Each event's MessageID is its key, copied into the Idem-Id property; events of one partition key stay in order.
	err := eventhubs.Send(ctx, orders, &azeventhubs.EventDataBatchOptions{PartitionKey: to.Ptr("customer-7")},
		&azeventhubs.EventData{MessageID: to.Ptr("order-1042"), Body: order})
	// block end
	if err != nil {
		return err
	}
	// block: eventhubs
	// p: azeventhubs.NewProcessor(consumerClient, checkpointStore, nil); it balances the partitions.
	g, err := eventhubs.NewGuard(store, "orders", azeventhubs.DefaultConsumerGroup, idem.Options{}) // scope: the hub and the group
	if err != nil {
		return err
	}
	h := eventhubs.Handle(func(ctx context.Context, ev *azeventhubs.ReceivedEventData) ([]byte, error) {
		return nil, sendReceipt(ctx, idem.DeriveKey(ctx, "receipt"), ev.Body)
	})
	err = eventhubs.Consume(ctx, p, g, h, eventhubs.Options{EventHub: "orders", DeadLetter: dlq})
	// block end
	if err != nil {
		return err
	}
	// block: eventhubs-tx
	htx := eventhubs.HandleTx(func(ctx context.Context, tx *sql.Tx, ev *azeventhubs.ReceivedEventData) ([]byte, error) {
		_, err := tx.ExecContext(ctx, `insert into charges(order_id, body) values (?, ?)`, eventhubs.MessageOf(ev).ID, ev.Body)
		return nil, err
	})
	// block end
	_ = htx
	// block: eventhubs-replay
	// dead: an event read from the dead-letter hub; Replay sends its original back to its hub.
	err = eventhubs.Replay(ctx, orders, dead)
	// block end
	return err
}

func guideEventHubsCheckpoint(ctx context.Context, pgStore *postgres.Store, consumerClient *azeventhubs.ConsumerClient, dlqProducer *azeventhubs.ProducerClient) error {
	// block: eventhubs-checkpoint
	cps, err := checkpointstore.New(pgStore, checkpointstore.Options{}) // ownership and checkpoints beside idem's records
	if err != nil {
		return err
	}
	p, err := azeventhubs.NewProcessor(consumerClient, cps, nil) // Processors balance the partitions through it
	if err != nil {
		return err
	}
	g, err := eventhubs.NewGuard(pgStore, "orders", azeventhubs.DefaultConsumerGroup, idem.Options{}) // scope: hub and consumer group
	if err != nil {
		return err
	}
	h := eventhubs.HandleCheckpoint(func(ctx context.Context, tx pgx.Tx, ev *azeventhubs.ReceivedEventData) error {
		_, err := tx.Exec(ctx, `insert into charges(order_id, body) values ($1, $2)`, *ev.MessageID, ev.Body)
		return err // the charge, the key's marker and the checkpoint commit together
	})
	err = eventhubs.Consume(ctx, p, g, h, eventhubs.Options{DeadLetter: dlqProducer, EventHub: "orders"})
	// block end
	return err
}

func guideEventHubsCheckpointSQL(ctx context.Context, store *sqlite.Store, consumerClient *azeventhubs.ConsumerClient) (eventhubs.Handler, error) {
	// block: eventhubs-checkpoint-sql
	cps, err := checkpointstore.New(store, checkpointstore.Options{}) // store/sqlite or store/mysql: *sql.Tx
	if err != nil {
		return eventhubs.Handler{}, err
	}
	if err := cps.Migrate(ctx); err != nil { // the ownership and checkpoint tables, once
		return eventhubs.Handler{}, err
	}
	p, err := azeventhubs.NewProcessor(consumerClient, cps, nil)
	if err != nil {
		return eventhubs.Handler{}, err
	}
	h := eventhubs.HandleCheckpoint(func(ctx context.Context, tx *sql.Tx, ev *azeventhubs.ReceivedEventData) error {
		_, err := tx.ExecContext(ctx, `insert into charges(order_id, body) values (?, ?)`, *ev.MessageID, ev.Body)
		return err
	})
	// block end
	_ = p
	return h, nil
}

var _ = []any{guideEventHubsCheckpointSQL, guideEventHubsCheckpoint, guideEventHubs, helloWorld, guideNATS, guideAMQP, guideKafka, guideServiceBus, guideSQS, guidePubSub, guideRedisStream, guideMQTT, guideWatermill}
