// Command cosmos-orders is the seed's Cosmos DB example on the MongoDB API
// (Azure Cosmos DB for MongoDB, MongoDB, FerretDB), behind NATS JetStream:
// each order event creates one order document whose _id is the order id, so
// creating it is the claim. On a duplicate key (code 11000) the stored
// request hash decides: the same hash is a duplicate (acked, nothing
// written), another hash is an order id reused with other content
// (dead-lettered to orders.dlq, and alerted). No record beside the order,
// no transaction needed.
//
//	NATS_URL=nats://127.0.0.1:4222 MONGO_URL=mongodb://127.0.0.1:27017/ go run .
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/idemgo/idem"
	natsidem "github.com/idemgo/idem/broker/nats"
	mongoidem "github.com/idemgo/idem/store/mongo"
)

type config struct {
	NATSURL  string
	MongoURL string
	Database string
	Stream   string // the order events' stream; subjects Stream.lower + ".>"
	Subject  string // where orders are published
	DLQ      string // dead-letter subject
	Logger   *slog.Logger
}

// order is the event a shop publishes; its id is the order id.
type order struct {
	ID       string  `json:"id" bson:"-"`
	Customer string  `json:"customer" bson:"customer"`
	Total    float64 `json:"total" bson:"total"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := config{
		NATSURL:  getenv("NATS_URL", nats.DefaultURL),
		MongoURL: getenv("MONGO_URL", "mongodb://127.0.0.1:27017/"),
		Database: "shop", Stream: "ORDERS", Subject: "orders.created", DLQ: "orders.dlq",
		Logger: slog.Default(),
	}
	if err := run(ctx, cfg, nil); err != nil {
		log.Fatal(err)
	}
}

// run consumes order events until ctx ends. handled, when set, is called
// after each order document is written (tests use it to crash there).
func run(ctx context.Context, cfg config, handled func(id string) error) error {
	nc, err := nats.Connect(cfg.NATSURL, nats.Name("cosmos-orders"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := setupJetStream(ctx, js, cfg)
	if err != nil {
		return err
	}
	client, err := mongo.Connect(options.Client().ApplyURI(cfg.MongoURL))
	if err != nil {
		return err
	}
	defer client.Disconnect(context.WithoutCancel(ctx))
	db := client.Database(cfg.Database)

	// Entity mode: the order document is the only record. Without a
	// transaction the insert must be the handler's one write, as it is.
	inbox, err := mongoidem.NewEntityInbox(db, mongoidem.EntityInboxOptions{NoTransaction: true})
	if err != nil {
		return err
	}
	g, err := idem.NewInbox(inbox, idem.Options{Scope: natsidem.ScopeFor(cons), Observer: alerts{cfg.Logger}})
	if err != nil {
		return err
	}
	orders := &mongoidem.Entities{Collection: db.Collection("orders"), FingerprintField: "request_hash", Scope: "orders"}
	h := natsidem.HandleTx(func(ctx context.Context, _ *mongo.Session, msg jetstream.Msg) ([]byte, error) {
		var o order
		if err := json.Unmarshal(msg.Data(), &o); err != nil || o.ID == "" {
			return nil, idem.Permanent(fmt.Errorf("bad order event: %q", msg.Data()))
		}
		if err := orders.Insert(ctx, o.ID, requestHash(msg.Data()), o); err != nil {
			return nil, err // duplicate: acked; conflict: dead-lettered
		}
		if handled != nil {
			return nil, handled(o.ID)
		}
		return nil, nil
	})
	return natsidem.Consume(ctx, cons, g, h, natsidem.Options{Concurrency: 4, JetStream: js, DeadLetterSubject: cfg.DLQ})
}

// requestHash is the hash of the order as sent, stored beside it.
func requestHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// alerts logs every order id reused with other content.
type alerts struct{ log *slog.Logger }

func (a alerts) Observe(ctx context.Context, e idem.Event) {
	if e.Outcome == idem.OutcomeConflict {
		a.log.ErrorContext(ctx, "order id reused with other content: dead-lettered", "key", e.Key.String())
	}
}

// setupJetStream declares the order stream, a stream keeping the dead
// letters, and the durable consumer.
func setupJetStream(ctx context.Context, js jetstream.JetStream, cfg config) (jetstream.Consumer, error) {
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: cfg.Stream, Subjects: []string{cfg.Subject}}); err != nil {
		return nil, err
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: cfg.Stream + "_DLQ", Subjects: []string{cfg.DLQ}}); err != nil {
		return nil, err
	}
	return js.CreateOrUpdateConsumer(ctx, cfg.Stream, jetstream.ConsumerConfig{
		Durable: "orders", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
	})
}

func getenv(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
