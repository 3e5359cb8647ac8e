package pubsubidem_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"cloud.google.com/go/pubsub/v2"

	"github.com/idemgo/idem"
	pubsubidem "github.com/idemgo/idem/broker/pubsub"
	"github.com/idemgo/idem/store/memory"
)

// A billing service consumes the orders-billing subscription and charges
// each order once, however often Pub/Sub delivers it and however often
// the publisher's client retried the publish: the key is the publisher's
// Idem-Id attribute (or, for CloudEvents publishers, ce-source and ce-id).
// The subscription's dead-letter policy allows 10 delivery attempts;
// conflicts, orders rejected for good and orders failing 10 times go to
// orders-dlq with the reason in the Idem-Reason attribute.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	client, err := pubsub.NewClient(ctx, "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	sub := client.Subscriber("orders-billing")
	sub.ReceiveSettings.MaxOutstandingMessages = 16 // about Concurrency: no messages idle in this process
	dlq := client.Publisher("orders-dlq")
	defer dlq.Stop()

	store := memory.New() // a shared store (store/postgres, store/redis) in production
	g, err := pubsubidem.NewGuard(store, sub, idem.Options{Key: idem.FirstOf(idem.MessageID, idem.CloudEventsKey)})
	if err != nil {
		log.Fatal(err)
	}
	h := pubsubidem.Handle(func(ctx context.Context, m *pubsubidem.Message) ([]byte, error) {
		return charge(ctx, idem.DeriveKey(ctx, "charge"), m.Data)
	})
	err = pubsubidem.Consume(ctx, sub, g, h, pubsubidem.Options{ // or NewConsumer + Run
		Concurrency: 8, MaxDeliveries: 10,
		DeadLetter: dlq,
	})
	if err != nil {
		log.Fatal(err) // a misconfiguration, found before any message is received, or the client's error
	}
}

// The producer side: Publish sets the Idem-Id attribute, the key of every
// copy of the message.
func ExamplePublish() {
	ctx := context.Background()
	client, err := pubsub.NewClient(ctx, "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	orders := client.Publisher("orders")
	defer orders.Stop()
	res := pubsubidem.Publish(ctx, orders, "order-42", &pubsub.Message{Data: []byte(`{"amount":42}`)})
	if _, err := res.Get(ctx); err != nil {
		log.Fatal(err)
	}
}

func charge(context.Context, string, []byte) ([]byte, error) { return []byte("ok"), nil }
