// Command servicebus-cosmos is the seed's worked example on its own SDKs:
// a Service Bus consumer (azservicebus) that keeps its orders in Azure
// Cosmos DB for NoSQL (azcosmos). The producer sends each order with its
// order id as the message id (servicebus.Send); the consumer receives in
// PeekLock; the orders container is partitioned by /orderId and an order
// document's id is the order id, so creating it is the dedup check. A
// create that meets the order (409) reads it and compares the stored
// request hash: equal, the message is a duplicate and is completed;
// different, it is dead-lettered with an alert. A transient failure
// abandons the message, which comes back. The order and its lines are
// written in one transactional batch in the order's partition, all or
// none. The queue's duplicate detection drops producer retries.
//
// Without SERVICEBUS_CONNECTION_STRING it runs on the in-process Service
// Bus of broker/servicebus/servicebustest, and without COSMOS_ENDPOINT on
// the in-process Cosmos DB of store/cosmos/cosmostest; with them, on Azure
// (the queue "orders" must exist, with duplicate detection on; the key in
// COSMOS_KEY).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/servicebus"
	"github.com/idemgo/idem/broker/servicebus/servicebustest"
	"github.com/idemgo/idem/store/cosmos"
	"github.com/idemgo/idem/store/cosmos/cosmostest"
)

// Order is the message body.
type Order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Lines    []Line `json:"lines"`
}

// Line is one line of an order.
type Line struct {
	SKU   string `json:"sku"`
	Qty   int    `json:"qty"`
	Price int    `json:"price"` // cents
}

// Total is the order's amount in cents.
func (o Order) Total() int {
	t := 0
	for _, l := range o.Lines {
		t += l.Qty * l.Price
	}
	return t
}

// The orders container (step 3 of the setup): partitioned by the order
// id, so an order's documents share one logical partition.
const (
	Database         = "shop"
	Container        = "orders"
	PartitionKeyPath = "/orderId"
)

// CreateOrders creates the database and the orders container when they
// are missing, partitioned by /orderId, with a default time to live of -1
// (documents keep no ttl of their own; nothing expires).
func CreateOrders(ctx context.Context, c *azcosmos.Client) (*azcosmos.ContainerClient, error) {
	if _, err := c.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: Database}, nil); err != nil && !isConflict(err) {
		return nil, err
	}
	db, err := c.NewDatabase(Database)
	if err != nil {
		return nil, err
	}
	ttl := int32(-1)
	_, err = db.CreateContainer(ctx, azcosmos.ContainerProperties{
		ID:                     Container,
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Kind: azcosmos.PartitionKeyKindHash, Paths: []string{PartitionKeyPath}, Version: 2},
		DefaultTimeToLive:      &ttl,
	}, nil)
	if err != nil && !isConflict(err) {
		return nil, err
	}
	return db.NewContainer(Container)
}

func isConflict(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusConflict
}

// App is the consumer side: the orders container and the consumer's hooks.
type App struct {
	Orders *azcosmos.ContainerClient
	// Fail, when set, is asked before each order is written: a non-nil
	// error is a transient failure (the message is abandoned and comes
	// back).
	Fail func(o Order) error
	// Alert receives every dead letter (conflicts above all).
	Alert func(msg *azservicebus.ReceivedMessage, r broker.Report)
	// Hooks are passed to the consumer, beside Alert.
	Hooks broker.Hooks[*azservicebus.ReceivedMessage]
	// Observer sees every message's outcome (idem.Options.Observer).
	Observer idem.Observer

	entities *cosmos.Entities
}

// NewApp returns the consumer side over the orders container.
func NewApp(orders *azcosmos.ContainerClient) *App {
	return &App{Orders: orders, entities: &cosmos.Entities{Container: orders, PartitionKeyPath: PartitionKeyPath,
		FingerprintField: "requestHash"}}
}

// Guard is the consumer's guard for queue: entity mode, the order document
// is the only record (idem.NewInbox over cosmos.NewEntityInbox), scoped by
// the queue.
func (a *App) Guard(queue string) (*idem.Guard, error) {
	inbox, err := cosmos.NewEntityInbox(a.Orders)
	if err != nil {
		return nil, err
	}
	return idem.NewInbox(inbox, idem.Options{Scope: servicebus.EntityPath(queue), Observer: a.Observer})
}

// orderDoc is an order document: its id and orderId are the order id
// (Entities.Insert sets them, and the request hash).
type orderDoc struct {
	Customer string `json:"customer"`
	Total    int    `json:"total"`
	Lines    int    `json:"lines"`
}

// lineDoc is a line document, in its order's partition.
type lineDoc struct {
	ID      string `json:"id"`
	OrderID string `json:"orderId"`
	Line
}

// Handler writes one order in the guard's transactional batch: the order
// document, created under the order id with the request hash beside it,
// and a document per line, in the order's partition. The batch commits
// all of them or none; a stored order with the same hash makes the
// message a duplicate, another hash a conflict.
func (a *App) Handler() servicebus.Handler {
	return servicebus.HandleTx(func(ctx context.Context, b *cosmos.Batch, msg *azservicebus.ReceivedMessage) ([]byte, error) {
		var o Order
		if err := json.Unmarshal(msg.Body, &o); err != nil {
			return nil, idem.Permanent(fmt.Errorf("order body: %w", err))
		}
		im := servicebus.MessageOf(msg)
		if o.ID != im.ID {
			return nil, idem.Permanent(fmt.Errorf("order %q sent as message %q", o.ID, im.ID))
		}
		if a.Fail != nil {
			if err := a.Fail(o); err != nil {
				return nil, err
			}
		}
		fp, err := idem.PayloadFingerprint(im)
		if err != nil {
			return nil, err
		}
		if err := a.entities.Insert(ctx, b, o.ID, fp, orderDoc{Customer: o.Customer, Total: o.Total(), Lines: len(o.Lines)}); err != nil {
			return nil, err
		}
		for i, l := range o.Lines {
			doc, err := json.Marshal(lineDoc{ID: fmt.Sprintf("%s-line-%d", o.ID, i+1), OrderID: o.ID, Line: l})
			if err != nil {
				return nil, err
			}
			b.CreateItem(doc, nil)
		}
		return nil, nil
	})
}

// Consume runs one consumer of the queue until ctx ends.
func (a *App) Consume(ctx context.Context, client *azservicebus.Client, queue string, opts servicebus.Options) error {
	g, err := a.Guard(queue)
	if err != nil {
		return err
	}
	r, err := client.NewReceiverForQueue(queue, nil) // PeekLock
	if err != nil {
		return err
	}
	defer r.Close(context.WithoutCancel(ctx))
	opts.EntityPath = queue
	opts.Hooks = a.Hooks
	opts.Hooks.OnDeadLetter = func(ctx context.Context, msg *azservicebus.ReceivedMessage, r broker.Report) {
		if a.Alert != nil {
			a.Alert(msg, r)
		}
		if a.Hooks.OnDeadLetter != nil {
			a.Hooks.OnDeadLetter(ctx, msg, r)
		}
	}
	return servicebus.Consume(ctx, r, g, a.Handler(), opts)
}

// Produce sends o with its order id as the message id (servicebus.Send:
// the id travels in Idem-Id, and MessageId is the id with a digest of the
// content, so duplicate detection drops a retry but never an id reused
// with other content).
func Produce(ctx context.Context, s *azservicebus.Sender, o Order) error {
	body, err := json.Marshal(o)
	if err != nil {
		return err
	}
	return servicebus.Send(ctx, s, o.ID, &azservicebus.Message{Body: body})
}

// StoredOrders returns the ids of the order documents (not the lines),
// across partitions.
func StoredOrders(ctx context.Context, orders *azcosmos.ContainerClient) ([]string, error) {
	pager := orders.NewQueryItemsPager("SELECT c.id FROM c WHERE NOT IS_DEFINED(c.sku)", azcosmos.NewPartitionKey(), nil)
	var ids []string
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, it := range page.Items {
			var d struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(it, &d); err != nil {
				return nil, err
			}
			ids = append(ids, d.ID)
		}
	}
	return ids, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

// cosmosClient is the Cosmos DB client of COSMOS_ENDPOINT and COSMOS_KEY,
// or of an in-process cosmostest account (stopped by the returned func).
func cosmosClient() (*azcosmos.Client, func(), error) {
	if endpoint := os.Getenv("COSMOS_ENDPOINT"); endpoint != "" {
		cred, err := azcosmos.NewKeyCredential(os.Getenv("COSMOS_KEY"))
		if err != nil {
			return nil, nil, err
		}
		c, err := azcosmos.NewClientWithKey(endpoint, cred, nil)
		return c, func() {}, err
	}
	srv, err := cosmostest.NewServer(cosmostest.Options{})
	if err != nil {
		return nil, nil, err
	}
	log.Printf("in-process Cosmos DB at %s", srv.URL())
	c, err := srv.NewClient()
	if err != nil {
		srv.Close()
		return nil, nil, err
	}
	return c, srv.Close, nil
}

func run(ctx context.Context) error {
	conn := os.Getenv("SERVICEBUS_CONNECTION_STRING")
	if conn == "" {
		srv, err := servicebustest.NewServer()
		if err != nil {
			return err
		}
		defer srv.Close()
		if err := srv.CreateQueue("orders", servicebustest.QueueOptions{RequiresDuplicateDetection: true}); err != nil {
			return err
		}
		conn = srv.ConnectionString()
		log.Printf("in-process Service Bus at %s", srv.Addr())
	}
	client, err := azservicebus.NewClientFromConnectionString(conn, nil)
	if err != nil {
		return err
	}
	defer client.Close(context.WithoutCancel(ctx))
	cc, stopCosmos, err := cosmosClient()
	if err != nil {
		return err
	}
	defer stopCosmos()
	orders, err := CreateOrders(ctx, cc)
	if err != nil {
		return err
	}
	app := NewApp(orders)
	app.Alert = func(msg *azservicebus.ReceivedMessage, r broker.Report) {
		log.Printf("ALERT: order %s dead-lettered: %s", servicebus.MessageOf(msg).ID, r.Reason)
	}
	s, err := client.NewSender("orders", nil)
	if err != nil {
		return err
	}
	a1 := Order{ID: "A-1", Customer: "ana", Lines: []Line{{SKU: "tea", Qty: 2, Price: 450}}}
	a2 := Order{ID: "A-2", Customer: "bo", Lines: []Line{{SKU: "cup", Qty: 1, Price: 900}, {SKU: "pot", Qty: 1, Price: 2500}}}
	a2b := a2
	a2b.Lines = []Line{{SKU: "cup", Qty: 9, Price: 900}}
	for _, o := range []Order{a1, a1, a2, a2b} { // a retry of A-1; A-2 reused with other lines
		if err := Produce(ctx, s, o); err != nil {
			return err
		}
	}
	runCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := app.Consume(runCtx, client, "orders", servicebus.Options{}); err != nil {
		return err
	}
	ids, err := StoredOrders(ctx, orders)
	if err != nil {
		return err
	}
	n := len(ids)
	log.Printf("%d orders stored", n)
	return nil
}
