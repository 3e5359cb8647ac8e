package cosmos_test

import (
	"context"
	"fmt"
	"log"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/cosmos"
	"github.com/idemgo/idem/store/cosmos/cosmostest"
)

// exampleOrders is an orders container partitioned by /orderId on an
// in-process account; on Azure, azcosmos.NewClientWithKey with the
// account's endpoint and key.
func exampleOrders(ctx context.Context) (*azcosmos.ContainerClient, func()) {
	srv, err := cosmostest.NewServer(cosmostest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	client, err := srv.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "shop"}, nil); err != nil {
		log.Fatal(err)
	}
	db, _ := client.NewDatabase("shop")
	ttl := int32(-1) // markers expire by their own ttl; documents without one never
	if _, err := db.CreateContainer(ctx, azcosmos.ContainerProperties{ID: "orders", DefaultTimeToLive: &ttl,
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/orderId"}}}, nil); err != nil {
		log.Fatal(err)
	}
	orders, _ := db.NewContainer("orders")
	return orders, srv.Close
}

// Entity mode, the seed's example: the order document's id and partition
// key are the order id, so creating it is the dedup check. A redelivery
// meets it (409), reads it and finds the same request hash: a duplicate.
// The order id reused with other content is a conflict, dead-lettered.
func ExampleEntities() {
	ctx := context.Background()
	orders, stop := exampleOrders(ctx)
	defer stop()
	inbox, err := cosmos.NewEntityInbox(orders)
	if err != nil {
		log.Fatal(err)
	}
	g, err := idem.NewInbox(inbox, idem.Options{Scope: "orders"})
	if err != nil {
		log.Fatal(err)
	}
	table := &cosmos.Entities{Container: orders, PartitionKeyPath: "/orderId"}
	handle := func(msg idem.Message) {
		res, err := idem.DoTx(ctx, g, msg, func(ctx context.Context, b *cosmos.Batch) ([]byte, error) {
			fp, err := idem.PayloadFingerprint(msg)
			if err != nil {
				return nil, err
			}
			return nil, table.Insert(ctx, b, msg.ID, fp, []byte(msg.Payload))
		})
		fmt.Println(res.Outcome, idem.Decide(res, err))
	}
	handle(idem.Message{ID: "A-1", Payload: []byte(`{"amount": 10}`)})
	handle(idem.Message{ID: "A-1", Payload: []byte(`{"amount": 10}`)})
	handle(idem.Message{ID: "A-1", Payload: []byte(`{"amount": 99}`)})
	// Output:
	// processed ack
	// duplicate ack
	// conflict dead_letter
}

// The transactional batch inbox: idem's marker and the handler's
// documents go in one transactional batch in the message's partition, all
// or none.
func ExampleBatchInbox() {
	ctx := context.Background()
	orders, stop := exampleOrders(ctx)
	defer stop()
	inbox, err := cosmos.NewBatchInbox(orders, cosmos.InboxOptions{PartitionKeyPath: "/orderId"})
	if err != nil {
		log.Fatal(err)
	}
	g, err := idem.NewInbox(inbox, idem.Options{Scope: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	msg := idem.Message{ID: "A-1", Payload: []byte(`{"amount": 10}`)}
	for range 2 {
		res, err := idem.DoTx(ctx, g, msg, func(ctx context.Context, b *cosmos.Batch) ([]byte, error) {
			b.CreateItem([]byte(`{"id": "A-1-charge", "orderId": "A-1", "amount": 10}`), nil)
			b.CreateItem([]byte(`{"id": "A-1-receipt", "orderId": "A-1"}`), nil)
			return []byte("charged"), nil
		})
		fmt.Println(res.Outcome, string(res.Value), err)
	}
	// Output:
	// processed charged <nil>
	// duplicate charged <nil>
}
