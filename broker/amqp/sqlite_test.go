package amqpidem_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/internal/consumetest"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestSQLiteInbox wires two competing consumers to the SQLite store's
// transactional inbox; one loses its connection before acking. Each charge
// row is written in the transaction that writes the dedup marker, so
// producer retries and redeliveries must not add rows.
func TestSQLiteInbox(t *testing.T) {
	e := newEnv(t)
	store := consumetest.ChargesDB(t)
	ctx := context.Background()
	const unique = 200
	msgs := withRetries(unique, func(i int) amqp.Publishing {
		return amqp.Publishing{MessageId: fmt.Sprintf("order-%d", i), Body: consumetest.ChargeBody(i)}
	})
	total := len(msgs)
	e.publishAll(t, msgs)

	g, err := amqpidem.NewGuard(store, e.queue, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	charge := func(ctx context.Context, tx *sql.Tx, d amqp.Delivery) ([]byte, error) {
		return nil, consumetest.Charge(ctx, tx, d.MessageId, d.Body)
	}
	tr := newTracker(total)
	opts := amqpidem.Options{Queue: e.queue, DeadLetterRoutingKey: e.dlq, Concurrency: 4, Prefetch: 8,
		Backoff: idem.ExponentialBackoff(10*time.Millisecond, 50*time.Millisecond), OnResult: tr.onResult}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	connX, chX := e.dial(t)
	xStarted := make(chan struct{})
	var handledX atomic.Int64
	errX := make(chan error, 1)
	go func() {
		errX <- amqpidem.Consume(runCtx, chX, g, amqpidem.HandleTx(func(ctx context.Context, tx *sql.Tx, d amqp.Delivery) ([]byte, error) {
			switch handledX.Add(1) {
			case 10:
				close(xStarted)
			case 40:
				connX.Close() // the transaction still commits; the ack is lost
			}
			return charge(ctx, tx, d)
		}), opts)
	}()
	ch := e.channel(t)
	runDone := make(chan error, 1)
	go func() {
		select {
		case <-xStarted:
		case <-runCtx.Done():
		}
		runDone <- amqpidem.Consume(runCtx, ch, g, amqpidem.HandleTx(charge), opts)
	}()
	consumetest.AwaitSettled(t, tr.done, runDone, tr.settled, total)
	awaitCrashed(t, errX, &handledX)
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	consumetest.ChargedOnce(t, store, unique)
	if d := tr.count(idem.OutcomeDuplicate); d < total-unique {
		t.Fatalf("%d duplicates, want at least %d", d, total-unique)
	}
}
