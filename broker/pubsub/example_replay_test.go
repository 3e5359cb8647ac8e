package pubsubidem_test

import (
	"context"
	"log"

	"cloud.google.com/go/pubsub/v2"

	pubsubidem "github.com/idemgo/idem/broker/pubsub"
)

// An operator's replay: pull from a subscription of the dead-letter topic,
// publish each dead letter back to the topic it came from, then ack it.
func ExampleReplay() {
	ctx := context.Background()
	client, err := pubsub.NewClient(ctx, "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	orders := client.Publisher("orders")
	defer orders.Stop()
	err = client.Subscriber("orders-dlq-replay").Receive(ctx, func(ctx context.Context, dl *pubsub.Message) {
		if err := pubsubidem.Replay(ctx, orders, dl); err != nil {
			log.Printf("not replayed: %v", err)
			dl.Nack()
			return
		}
		dl.Ack()
	})
	if err != nil {
		log.Fatal(err)
	}
}
