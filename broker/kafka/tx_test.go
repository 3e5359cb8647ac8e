package kafka_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/internal/consumetest"
)

// TestRunTx: the transactional variant writes each business effect exactly
// once; a failed handler rolls back its effect with the marker.
func TestRunTx(t *testing.T) {
	e := newEnv(t, "ledger", 3)
	w := buildWorkload(e.topic, 3, 200)
	e.produce(w.recs...)
	st := consumetest.NewTxStore()
	g, err := idem.New(st, idem.Options{Scope: "x"})
	if err != nil {
		t.Fatal(err)
	}
	fail := everyNth(7)
	var failMu sync.Mutex
	failed := make(map[string]bool)
	cl := e.consumerClient()
	defer cl.Close()
	c, err := kafka.NewConsumer(cl, g, kafka.Options{DeadLetterTopic: e.dlq, RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond, CommitInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- kafka.RunTx(ctx, c, func(ctx context.Context, tx *consumetest.Tx, rec *kgo.Record) ([]byte, error) {
			id := idOf(rec)
			tx.Charge(id) // staged: rolled back on error
			failMu.Lock()
			defer failMu.Unlock()
			if fail(id) && !failed[id] {
				failed[id] = true
				return nil, errors.New("deadlock detected, retry")
			}
			return []byte("ok"), nil
		})
	}()
	e.waitCommitted(t)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunTx: %v", err)
	}

	ledger := st.CommittedOrders()
	consumetest.AppliedOnce(t, "committed", ledger, len(w.ids))
	for _, id := range w.ids {
		if ledger[id] != 1 {
			t.Errorf("order %s committed %d times, want 1", id, ledger[id])
		}
	}
	if len(failed) == 0 {
		t.Error("no failure injected")
	}
	for _, r := range e.dlqRecords(w.conflicts) {
		checkDeadLetter(t, r, e.topic, "conflict")
	}
}

// TestRunTxNeedsTxStore: RunTx refuses a store without an inbox for Tx.
func TestRunTxNeedsTxStore(t *testing.T) {
	e := newEnv(t, "notx", 1)
	g, _ := newGuard(t, nil)
	cl := e.consumerClient()
	defer cl.Close()
	c, err := kafka.NewConsumer(cl, g, kafka.Options{DeadLetterTopic: e.dlq})
	if err != nil {
		t.Fatal(err)
	}
	err = kafka.RunTx(context.Background(), c, func(context.Context, *consumetest.Tx, *kgo.Record) ([]byte, error) { return nil, nil })
	if !errors.Is(err, idem.ErrNoTx) {
		t.Fatalf("RunTx = %v, want ErrNoTx", err)
	}
}
