package watermillidem_test

import (
	"context"
	"log"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	watermillidem "github.com/idemgo/idem/broker/watermill"
)

// An operator's replay: subscribe to the poison topic, publish each dead
// letter back to the topic its handler consumed, then ack it.
func ExampleReplay() {
	ctx := context.Background()
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}) // the Pub/Sub the router uses
	poison, err := pubSub.Subscribe(ctx, "orders.poison")
	if err != nil {
		log.Fatal(err)
	}
	for dl := range poison {
		if err := watermillidem.Replay(ctx, pubSub, dl); err != nil {
			log.Printf("%s not replayed: %v", dl.UUID, err)
			dl.Nack()
			continue
		}
		dl.Ack()
	}
}
