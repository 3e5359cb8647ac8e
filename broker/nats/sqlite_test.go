package natsidem_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/idem"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/internal/consumetest"
	"github.com/nats-io/nats.go/jetstream"
)

// TestSQLiteInbox wires the consumer to the SQLite store's transactional
// inbox: each charge row is written in the transaction that writes the
// dedup marker. Producer retries and lost acks must not add rows.
func TestSQLiteInbox(t *testing.T) {
	e := newEnv(t)
	store := consumetest.ChargesDB(t)
	ctx := context.Background()

	const unique = 200
	total := e.publishWithRetries(t, ".sql", unique, func(i int) (string, []byte) {
		return fmt.Sprintf("order-%d", i), consumetest.ChargeBody(i)
	})

	cons := e.consumer(t, "sql", time.Second)
	lossy := loseFirstAck(cons, 6, 0)
	g, err := natsidem.NewGuard(store, cons, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracker(t)
	tr.expect(total)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	runDone := make(chan error, 1)
	go func() {
		runDone <- natsidem.Consume(runCtx, lossy, g, natsidem.HandleTx(func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) ([]byte, error) {
			return nil, consumetest.Charge(ctx, tx, msg.Headers().Get(jetstream.MsgIDHeader), msg.Data())
		}), natsidem.Options{JetStream: e.js, DeadLetterSubject: e.dlq, Concurrency: 4,
			Backoff: idem.ExponentialBackoff(10*time.Millisecond, 50*time.Millisecond), OnResult: tr.onResult})
	}()
	consumetest.AwaitSettled(t, tr.done, runDone, tr.settled, total)
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	consumetest.ChargedOnce(t, store, unique)
	if d := tr.count(idem.OutcomeDuplicate); d < total-unique {
		t.Fatalf("%d duplicates, want at least %d", d, total-unique)
	}
}
