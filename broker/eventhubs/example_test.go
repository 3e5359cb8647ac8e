package eventhubs_test

import (
	"context"
	"log"
	"os"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/eventhubs"
	"github.com/idemgo/idem/store/memory"
)

func charge(ctx context.Context, key string, body []byte) ([]byte, error) { return nil, nil }

// checkpointStore is where the Processor keeps partition ownership and
// checkpoints: azeventhubs/v2/checkpoints.NewBlobStore in production.
var checkpointStore azeventhubs.CheckpointStore

// A consumer group's processor, each event handled two-phase under its key
// (Idem-Id, else its MessageID), conflicts and poison sent to another
// event hub with idem's properties.
func Example() {
	ctx := context.Background()
	conn := os.Getenv("EVENTHUBS_CONNECTION_STRING")
	consumer, err := azeventhubs.NewConsumerClientFromConnectionString(conn, "orders", azeventhubs.DefaultConsumerGroup, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close(ctx)
	dlq, err := azeventhubs.NewProducerClientFromConnectionString(conn, "orders-dlq", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer dlq.Close(ctx)
	p, err := azeventhubs.NewProcessor(consumer, checkpointStore, nil)
	if err != nil {
		log.Fatal(err)
	}
	store := memory.New()                                                                           // a shared store (store/postgres, store/redis) in production
	g, err := eventhubs.NewGuard(store, "orders", azeventhubs.DefaultConsumerGroup, idem.Options{}) // scope: the hub and the group
	if err != nil {
		log.Fatal(err)
	}
	h := eventhubs.Handle(func(ctx context.Context, ev *azeventhubs.ReceivedEventData) ([]byte, error) {
		return charge(ctx, idem.DeriveKey(ctx, "charge"), ev.Body)
	})
	if err := eventhubs.Consume(ctx, p, g, h, eventhubs.Options{EventHub: "orders", DeadLetter: dlq}); err != nil {
		log.Fatal(err)
	}
}

// The producer: each event's MessageID is its key, copied into the Idem-Id
// property; a producer's retry of the same events carries the same keys.
func ExampleSend() {
	ctx := context.Background()
	p, err := azeventhubs.NewProducerClientFromConnectionString(os.Getenv("EVENTHUBS_CONNECTION_STRING"), "orders", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)
	err = eventhubs.Send(ctx, p, &azeventhubs.EventDataBatchOptions{PartitionKey: to.Ptr("customer-7")},
		&azeventhubs.EventData{MessageID: to.Ptr("order-1042"), Body: []byte(`{"amount":30}`)})
	if err != nil {
		log.Fatal(err)
	}
}

// An operator's replay: read the dead-letter hub's events (here one
// partition from its start) and send each original back to its hub.
func ExampleReplay() {
	ctx := context.Background()
	conn := os.Getenv("EVENTHUBS_CONNECTION_STRING")
	dlq, err := azeventhubs.NewConsumerClientFromConnectionString(conn, "orders-dlq", azeventhubs.DefaultConsumerGroup, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer dlq.Close(ctx)
	orders, err := azeventhubs.NewProducerClientFromConnectionString(conn, "orders", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer orders.Close(ctx)
	pc, err := dlq.NewPartitionClient("0", &azeventhubs.PartitionClientOptions{StartPosition: azeventhubs.StartPosition{Earliest: to.Ptr(true)}})
	if err != nil {
		log.Fatal(err)
	}
	defer pc.Close(ctx)
	events, err := pc.ReceiveEvents(ctx, 100, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, dl := range events {
		if msg, err := eventhubs.DeadLetterOf(dl); err == nil {
			log.Printf("replaying %s (%s)", msg.ID, msg.Headers[idem.HeaderReason])
		}
		if err := eventhubs.Replay(ctx, orders, dl); err != nil {
			log.Printf("not replayed: %v", err)
		}
	}
}
