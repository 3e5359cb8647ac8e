package mongoidem_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/idemgo/idem"
	mongoidem "github.com/idemgo/idem/store/mongo"
)

// A consumer that sends one e-mail per event, whatever the broker
// redelivers: two-phase records in the collection idem_records.
func Example() {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:27017/"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(ctx)
	store, err := mongoidem.New(client.Database("mailer"), mongoidem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	g, err := idem.New(store, idem.Options{Scope: "mailer", Lease: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	msg := idem.Message{ID: "evt-42", Payload: []byte(`{"to":"ada@example.com"}`)}
	res, err := g.Do(ctx, msg, func(ctx context.Context) ([]byte, error) {
		return []byte("sent with key " + idem.DeriveKey(ctx, "send")), nil
	})
	if idem.Decide(res, err) == idem.ActionAck {
		fmt.Println(res.Outcome) // processed, or duplicate on a redelivery
	}
}

// Entity mode: the order document is the record. Its _id is the order id,
// so the insert is the claim; a redelivery finds it (duplicate) and an
// order id reused with other content is a conflict.
func ExampleEntities() {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:27017/"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(ctx)
	db := client.Database("shop")
	inbox, err := mongoidem.NewEntityInbox(db, mongoidem.EntityInboxOptions{NoTransaction: true})
	if err != nil {
		log.Fatal(err)
	}
	g, err := idem.NewInbox(inbox, idem.Options{Scope: "orders"})
	if err != nil {
		log.Fatal(err)
	}
	orders := &mongoidem.Entities{Collection: db.Collection("orders"), Scope: "orders"}
	msg := idem.Message{ID: "order-1042", Payload: []byte(`{"total":42}`)}
	fp, _ := idem.PayloadFingerprint(msg)
	res, err := idem.DoTx(ctx, g, msg, func(ctx context.Context, _ *mongo.Session) ([]byte, error) {
		return nil, orders.Insert(ctx, msg.ID, fp, bson.D{{Key: "total", Value: 42}})
	})
	switch idem.Decide(res, err) {
	case idem.ActionAck:
		fmt.Println(res.Outcome) // processed, or duplicate
	case idem.ActionDeadLetter:
		fmt.Println("conflict:", err) // the order id was reused with other content
	}
}
