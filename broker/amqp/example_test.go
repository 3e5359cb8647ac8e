package amqpidem_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"github.com/idemgo/idem"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/store/memory"
	amqp "github.com/rabbitmq/amqp091-go"
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

	// The scope is the consumer identity: the queue name.
	g, err := amqpidem.NewGuard(memory.New(), "orders", idem.Options{
		Key: idem.FirstOf(idem.MessageID, idem.CloudEventsKey), // message-id, else the CloudEvent's source|id
	})
	if err != nil {
		log.Fatal(err)
	}
	err = amqpidem.Consume(ctx, ch, g, amqpidem.Handle(func(ctx context.Context, d amqp.Delivery) ([]byte, error) {
		receipt, err := charge(ctx, idem.DeriveKey(ctx, "charge"), d.Body)
		return []byte(receipt), err
	}), amqpidem.Options{
		Queue:                "orders",
		DeadLetterRoutingKey: "orders.dlq", // through the default exchange
		Publisher:            dlq,
		Concurrency:          8,
	})
	if err != nil {
		log.Fatal(err) // ErrDeliveriesClosed: reconnect and run again
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

func charge(ctx context.Context, key string, order []byte) (string, error) { return "receipt", nil }
