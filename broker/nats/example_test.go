package natsidem_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/store/memory"
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

	// The guard holds the scope, the consumer identity "ORDERS/billing",
	// and the key: the id MessageOf reads (Idem-Id, else Nats-Msg-Id),
	// else the CloudEvent's source and id.
	g, err := natsidem.NewGuard(memory.New(), cons, idem.Options{
		Key: idem.FirstOf(idem.MessageID, idem.CloudEventsKey),
	})
	if err != nil {
		log.Fatal(err)
	}
	h := natsidem.Handle(func(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
		// Downstream calls carry a key derived from the message's, so a
		// retaken key (the previous owner crashed) is not charged twice.
		receipt, err := charge(ctx, idem.DeriveKey(ctx, "charge"), msg.Data())
		return []byte(receipt), err
	})
	err = natsidem.Consume(ctx, cons, g, h, natsidem.Options{Concurrency: 8, Hooks: broker.Hooks[jetstream.Msg]{
		OnDeadLetter: func(_ context.Context, msg jetstream.Msg, r broker.Report) {
			log.Printf("dead letter %s: %s (%v)", natsidem.MessageOf(msg).ID, r.Reason, r.Err)
		},
	}, JetStream: js, DeadLetterSubject: "orders.dlq",
	}) // or NewConsumer + Run
	if err != nil {
		log.Fatal(err) // a misconfiguration, found before any message is taken, or the stream's error
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

// An operator replays the dead letters of orders.dlq (stream ORDERS_DLQ)
// once the cause is fixed: the consumer's record decides what runs again.
func ExampleReplay() {
	ctx := context.Background()
	nc, _ := nats.Connect(nats.DefaultURL)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	dlq, err := js.OrderedConsumer(ctx, "ORDERS_DLQ", jetstream.OrderedConsumerConfig{})
	if err != nil {
		log.Fatal(err)
	}
	batch, err := dlq.Fetch(100, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	for dl := range batch.Messages() {
		if err := natsidem.Replay(ctx, js, dl); err != nil {
			log.Printf("not replayed: %v", err)
		}
	}
}

func charge(ctx context.Context, key string, order []byte) (string, error) { return "receipt", nil }
