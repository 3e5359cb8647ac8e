package outbox_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	outboxmemory "github.com/idemgo/idem/outbox/memory"
)

// A handler enqueues its outgoing message in its transaction; the relay
// publishes it once the transaction has committed, with a stable id
// derived from the inbound message's key. (With a database, the store is
// outbox/postgres, outbox/sqlite or outbox/mysql and the transaction the
// caller's pgx.Tx or *sql.Tx, inside idem.DoTx; the publisher is
// outbox/kafka, outbox/nats or outbox/amqp.)
func Example() {
	ob, _ := outboxmemory.New(outboxmemory.Options{})
	inbound := idem.ContextWithKey(context.Background(), idem.Key{Scope: "billing", ID: "order-42"})
	_ = ob.InTx(inbound, func(ctx context.Context, tx *outboxmemory.Tx) error {
		// ... the charge, written in tx ...
		return ob.Enqueue(ctx, tx, outbox.Message{
			Destination: "billing.charged",
			OrderingKey: "order-42",
			Payload:     []byte(`{"order":"order-42","amount":4200}`),
		})
	})

	published := make(chan struct{})
	pub := outbox.PublisherFunc(func(ctx context.Context, recs []outbox.Record) []error {
		for _, r := range recs {
			fmt.Printf("%s %s (id %.17s...)\n", r.Destination, r.Payload, r.ID)
		}
		close(published)
		return make([]error, len(recs)) // every record confirmed
	})
	relay, _ := outbox.NewRelay(ob, pub, outbox.RelayOptions{PollInterval: 10 * time.Millisecond})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- relay.Run(ctx) }()
	<-published
	stop()
	<-done
	// Output: billing.charged {"order":"order-42","amount":4200} (id idem-36248424c6fd...)
}
