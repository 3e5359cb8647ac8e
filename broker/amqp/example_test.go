package amqpidem_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/store/memory"
)

// A billing service charges each order of the "orders" queue once, however
// often RabbitMQ delivers it. Conflicting re-uses of an order id and orders
// rejected for good go to the "orders.dlq" queue with x-idem-reason.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	conn, err := amqp.Dial("amqp://guest:guest@localhost:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	dlq, _ := conn.Channel() // dead letters on their own channel
	if _, err := ch.QueueDeclare("orders.dlq", true, false, false, false, nil); err != nil {
		log.Fatal(err)
	}

	// The guard holds the scope, the consumer identity (the queue name),
	// and the key: the message-id, else the CloudEvent's source and id.
	g, err := amqpidem.NewGuard(memory.New(), "orders", idem.Options{
		Key: idem.FirstOf(idem.MessageID, idem.CloudEventsKey),
	})
	if err != nil {
		log.Fatal(err)
	}
	h := amqpidem.Handle(func(ctx context.Context, d amqp.Delivery) ([]byte, error) {
		receipt, err := charge(ctx, idem.DeriveKey(ctx, "charge"), d.Body)
		return []byte(receipt), err
	})
	err = amqpidem.Consume(ctx, ch, g, h, amqpidem.Options{ // or NewConsumer + Run
		Queue:                "orders",
		DeadLetterRoutingKey: "orders.dlq", // through the default exchange
		Publisher:            dlq,
		Concurrency:          8,
		Hooks: broker.Hooks[amqp.Delivery]{
			OnDeadLetter: func(_ context.Context, d amqp.Delivery, r broker.Report) {
				log.Printf("dead letter %s: %s (%v)", d.MessageId, r.Reason, r.Err)
			},
		},
	})
	if err != nil {
		log.Fatal(err) // a misconfiguration, found before any delivery is taken; ErrDeliveriesClosed: reconnect and run again
	}
}

// The producer publishes with a stable message id; a retry reuses it.
func ExamplePublish() {
	conn, _ := amqp.Dial("amqp://guest:guest@localhost:5672/")
	defer conn.Close()
	ch, _ := conn.Channel()
	_ = ch.Confirm(false) // Publish then waits for the broker's confirm
	err := amqpidem.Publish(context.Background(), ch, "shop", "orders.created", "order-1042",
		amqp.Publishing{ContentType: "application/json", Body: []byte(`{"total":42}`)},
		amqpidem.WithCloudEvent("/shop/orders", "order.created"))
	if err != nil {
		log.Fatal(err) // retry with the same id
	}
}

// An operator replays the dead letters of orders.dlq once the cause is
// fixed: the consumer's record decides what runs again.
func ExampleReplay() {
	ctx := context.Background()
	conn, _ := amqp.Dial("amqp://guest:guest@localhost:5672/")
	defer conn.Close()
	ch, _ := conn.Channel()
	_ = ch.Confirm(false) // Replay then waits for the broker's confirm
	for {
		dl, ok, err := ch.Get("orders.dlq", false)
		if err != nil || !ok {
			return
		}
		if err := amqpidem.Replay(ctx, ch, dl); err != nil {
			log.Printf("not replayed: %v", err)
			_ = dl.Nack(false, true)
			return
		}
		_ = dl.Ack(false)
	}
}

func charge(ctx context.Context, key string, order []byte) (string, error) { return "receipt", nil }
