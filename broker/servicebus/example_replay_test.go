package servicebus_test

import (
	"context"
	"log"
	"os"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/servicebus"
)

// An operator's replay: receive from the queue's $DeadLetterQueue, send
// each dead letter back to the queue, then complete it.
func ExampleReplay() {
	ctx := context.Background()
	client, err := azservicebus.NewClientFromConnectionString(os.Getenv("SERVICEBUS_CONNECTION_STRING"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	dlq, err := client.NewReceiverForQueue("orders", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		log.Fatal(err)
	}
	sender, err := client.NewSender("orders", nil)
	if err != nil {
		log.Fatal(err)
	}
	dead, err := dlq.ReceiveMessages(ctx, 10, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, dl := range dead {
		if msg, err := servicebus.DeadLetterOf(dl); err == nil {
			log.Printf("replaying %s (%s)", msg.ID, msg.Headers[idem.HeaderReason])
		}
		if err := servicebus.Replay(ctx, sender, dl); err != nil {
			log.Printf("not replayed: %v", err)
			continue
		}
		if err := dlq.CompleteMessage(ctx, dl, nil); err != nil {
			log.Printf("replayed, not completed: %v", err)
		}
	}
}
