package watermillidem_test

import (
	"context"
	"log"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	watermillidem "github.com/idemgo/idem/broker/watermill"
	"github.com/idemgo/idem/store/memory"
)

// A billing handler charges each order once, however often the Pub/Sub
// delivers it: a handler error is retried (the record released), a
// duplicate is acked without charging again, and an order id reused with
// other content goes to orders.poison with the reason in Idem-Reason.
func Example() {
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	// The scope is the handler's name; the key is the message's Idem-Id, or its UUID.
	g, err := watermillidem.NewGuard(memory.New(), "billing", idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	mw, err := watermillidem.New(g, watermillidem.Options{
		Hooks: broker.Hooks[*message.Message]{
			OnDeadLetter: func(_ context.Context, msg *message.Message, r broker.Report) {
				log.Printf("dead letter %s: %s (%v)", msg.UUID, r.Reason, r.Err)
			},
		},
		Publisher:   pubSub,
		PoisonTopic: "orders.poison",
	})
	if err != nil {
		log.Fatal(err) // a misconfiguration, found before any message is taken
	}
	h := watermillidem.Handle(mw, func(msg *message.Message) ([]*message.Message, error) {
		// Downstream calls carry a key derived from the message's.
		receipt, err := charge(msg.Context(), idem.DeriveKey(msg.Context(), "charge"), msg.Payload)
		if err != nil {
			return nil, err
		}
		return []*message.Message{message.NewMessage(idem.DeriveKey(msg.Context(), "receipt"), receipt)}, nil
	})
	// The router is the consumer: it subscribes and runs the handler.
	router.AddHandler("billing", "orders", pubSub, "receipts", pubSub, h)
	if err := router.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// The producer publishes each order with Publish: the order id in the
// Idem-Id metadata field (the consumers' key), the UUID derived from the
// id and the content, so a Pub/Sub that deduplicates by UUID drops a
// retry of the same order but never an id reused with other content.
func ExamplePublish() {
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer pubSub.Close()
	order := message.NewMessage("", []byte(`{"order":1042,"amount":30}`))
	if err := watermillidem.Publish(context.Background(), pubSub, "orders", "order-1042", order); err != nil {
		log.Fatal(err)
	}
}

func charge(context.Context, string, []byte) ([]byte, error) { return []byte("ok"), nil }
