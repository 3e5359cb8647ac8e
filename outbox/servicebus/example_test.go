package outboxservicebus_test

import (
	"context"
	"log"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem/outbox"
	outboxservicebus "github.com/idemgo/idem/outbox/servicebus"
)

// A relay publishing an outbox to Service Bus. ob is the outbox store
// (outbox/postgres, outbox/mysql, outbox/sqlite) the handlers enqueue
// into; a message with NotBefore is delivered from then on.
func Example() {
	ctx := context.Background()
	var ob outbox.Store // outboxpostgres.New(pool, outboxpostgres.Options{}), ...
	client, err := azservicebus.NewClientFromConnectionString("Endpoint=sb://example.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey=...", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	pub, err := outboxservicebus.New(client, outboxservicebus.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close(ctx)
	relay, err := outbox.NewRelay(ob, pub, outbox.RelayOptions{})
	if err != nil {
		log.Fatal(err)
	}
	go relay.Run(ctx)
}
