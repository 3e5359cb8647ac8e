package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/idemgo/idem/internal/ferretdbtest"
	"github.com/idemgo/idem/internal/testenv"
)

// TestOrdersOnce publishes 60 orders with producer retries (each order sent
// one to three times) and 6 order ids reused with other content, while the
// consumer "crashes" after writing every fifth order and before its ack (the
// delivery fails and is redelivered). At the end every order is stored once,
// with the hash of its first content, and exactly the 6 reuses are in the
// dead-letter stream.
func TestOrdersOnce(t *testing.T) {
	natsURL := testenv.NATS.Need(t)
	mongoURL := ferretdbtest.URI(t)
	tag := fmt.Sprintf("%d%d", time.Now().UnixNano(), rand.Uint32()%1000)
	cfg := config{
		NATSURL: natsURL, MongoURL: mongoURL, Database: "cosmos_orders_" + tag,
		Stream: "CORDERS_" + tag, Subject: "corders." + tag + ".created", DLQ: "corders." + tag + ".dlq",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	client, err := mongo.Connect(options.Client().ApplyURI(mongoURL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		client.Database(cfg.Database).Drop(context.Background())
		client.Disconnect(context.Background())
		js.DeleteStream(context.Background(), cfg.Stream)
		js.DeleteStream(context.Background(), cfg.Stream+"_DLQ")
	})
	if _, err := setupJetStream(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}

	const orders, reuses = 60, 6
	publish := func(o order) {
		t.Helper()
		data, _ := json.Marshal(o)
		msg := nats.NewMsg(cfg.Subject)
		msg.Data = data
		msg.Header.Set("Idem-Id", o.ID) // the order id is the key; no broker-side dedup
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	var first []order
	for i := range orders {
		o := order{ID: fmt.Sprintf("order-%03d", i), Customer: "c", Total: float64(10 + i)}
		first = append(first, o)
		for range 1 + i%3 { // producer retries
			publish(o)
		}
	}
	for i := range reuses {
		publish(order{ID: fmt.Sprintf("order-%03d", i*7), Customer: "someone else", Total: 999})
	}

	var (
		mu      sync.Mutex
		crashed = map[string]bool{}
	)
	crashAfterWrite := func(id string) error {
		mu.Lock()
		defer mu.Unlock()
		var n int
		fmt.Sscanf(id, "order-%d", &n)
		if n%5 == 0 && !crashed[id] {
			crashed[id] = true
			return fmt.Errorf("consumer crashed after writing %s, before its ack", id)
		}
		return nil
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, cfg, crashAfterWrite) }()

	coll := client.Database(cfg.Database).Collection("orders")
	dlq, err := js.Stream(ctx, cfg.Stream+"_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, cfg.Stream, "orders")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	var stored int64
	var dead uint64
	for {
		stored, _ = coll.CountDocuments(ctx, bson.D{})
		info, _ := dlq.Info(ctx)
		ci, _ := cons.Info(ctx)
		if info != nil {
			dead = info.State.Msgs
		}
		if stored == orders && dead == reuses && ci != nil && ci.NumPending == 0 && ci.NumAckPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("after 90s: %d orders stored (want %d), %d dead letters (want %d), consumer %+v", stored, orders, dead, reuses, ci)
		}
		time.Sleep(100 * time.Millisecond) // polling the servers' counters, not synchronising goroutines
	}
	stop()
	if err := <-done; err != nil && ctx.Err() == nil && runCtx.Err() == nil {
		t.Fatalf("run: %v", err)
	}
	for _, o := range first {
		var doc struct {
			Total float64 `bson:"total"`
			Hash  string  `bson:"request_hash"`
		}
		if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: o.ID}}).Decode(&doc); err != nil {
			t.Fatalf("%s: %v", o.ID, err)
		}
		data, _ := json.Marshal(o)
		if doc.Total != o.Total || doc.Hash != requestHash(data) {
			t.Fatalf("%s stored as %+v, want its first content", o.ID, doc)
		}
	}
	if len(crashed) != orders/5 {
		t.Fatalf("%d crashes after the write, want %d", len(crashed), orders/5)
	}
}

// TestMain stops the embedded MongoDB-API server (ferretdbtest) if a test
// started one.
func TestMain(m *testing.M) {
	code := m.Run()
	ferretdbtest.Stop()
	os.Exit(code)
}
