package servicebus_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/servicebus"
	"github.com/idemgo/idem/store/memory"
)

// A billing service receives the orders queue in PeekLock mode and
// charges each order once, however often Service Bus delivers it (a lock
// that ran out, a producer that sent an order twice). Conflicts and orders
// rejected for good are dead-lettered to the queue's $DeadLetterQueue with
// the reason in Idem-Reason (and DeadLetterReason). Use a durable store
// (store/postgres, store/redis) in production.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	client, err := azservicebus.NewClientFromConnectionString(os.Getenv("SERVICEBUS_CONNECTION_STRING"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	r, err := client.NewReceiverForQueue("orders", nil) // PeekLock, the default
	if err != nil {
		log.Fatal(err)
	}

	g, err := servicebus.NewGuard(memory.New(), servicebus.EntityPath("orders"), idem.Options{}) // scope: "orders"
	if err != nil {
		log.Fatal(err)
	}
	h := servicebus.Handle(func(ctx context.Context, m *azservicebus.ReceivedMessage) ([]byte, error) {
		return charge(ctx, idem.DeriveKey(ctx, "charge"), m.Body)
	})
	err = servicebus.Consume(ctx, r, g, h, servicebus.Options{ // or NewConsumer + Run
		EntityPath:  "orders",
		Concurrency: 8, MaxDeliveries: 10, // the queue's MaxDeliveryCount
	})
	if err != nil {
		log.Fatal(err) // a misconfiguration, found before any message is received, or the receiver's error
	}
}

// The producer sends with Send: the order id travels in Idem-Id (the
// consumers' key), and MessageID is idem.DedupID(id, fingerprint), so
// duplicate detection drops a retry of the same content but never an id
// reused with other content.
func ExampleSend() {
	ctx := context.Background()
	client, err := azservicebus.NewClientFromConnectionString(os.Getenv("SERVICEBUS_CONNECTION_STRING"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	s, err := client.NewSender("orders", nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := servicebus.Send(ctx, s, "order-1042", &azservicebus.Message{Body: []byte(`{"order":1042,"amount":30}`)}); err != nil {
		log.Fatal(err)
	}
}

func charge(context.Context, string, []byte) ([]byte, error) { return []byte("ok"), nil }
