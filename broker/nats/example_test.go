package natsidem_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"github.com/idemgo/idem"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/store/memory"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A billing service charges each order once, however often JetStream
// delivers it. Conflicting re-uses of an order id and orders rejected for
// good go to orders.dlq with the reason in Idem-Reason.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	cons, err := js.Consumer(ctx, "ORDERS", "billing")
	if err != nil {
		log.Fatal(err)
	}

	// The scope is the consumer identity: "ORDERS/billing".
	g, err := natsidem.NewGuard(memory.New(), cons, idem.Options{
		Key: idem.FirstOf(idem.MessageID, idem.CloudEventsKey), // Nats-Msg-Id, else the CloudEvent's source|id
	})
	if err != nil {
		log.Fatal(err)
	}
	err = natsidem.Consume(ctx, cons, g, natsidem.Handle(func(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
		// Downstream calls carry a key derived from the message's, so a
		// retaken key (the previous owner crashed) is not charged twice.
		receipt, err := charge(ctx, idem.DeriveKey(ctx, "charge"), msg.Data())
		return []byte(receipt), err
	}), natsidem.Options{JetStream: js, DeadLetterSubject: "orders.dlq", Concurrency: 8})
	if err != nil {
		log.Fatal(err)
	}
}

// The producer publishes with a stable id; a retry reuses it.
func ExamplePublish() {
	ctx := context.Background()
	nc, _ := nats.Connect(nats.DefaultURL)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ack, err := natsidem.Publish(ctx, js, "orders.created", "order-1042", []byte(`{"total":42}`),
		natsidem.WithCloudEvent("/shop/orders", "order.created"))
	if err != nil {
		log.Fatal(err) // retry with the same id
	}
	if ack.Duplicate {
		log.Print("already stored: a retry inside the duplicate window")
	}
}

func charge(ctx context.Context, key string, order []byte) (string, error) { return "receipt", nil }
