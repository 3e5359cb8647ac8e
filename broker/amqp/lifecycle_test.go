package amqpidem_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/internal/consumetest"
	"github.com/idemgo/idem/store/memory"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestGracefulShutdown cancels Run while a handler is in flight and more
// deliveries are prefetched: Run waits for the handler, acks its delivery,
// requeues the prefetched ones untouched and returns nil.
func TestGracefulShutdown(t *testing.T) {
	e := newEnv(t)
	var msgs []amqp.Publishing
	for i := 0; i < 5; i++ {
		msgs = append(msgs, amqp.Publishing{MessageId: fmt.Sprintf("s-%d", i), Body: []byte("{}")})
	}
	e.publishAll(t, msgs)
	g, err := amqpidem.NewGuard(memory.New(), e.queue, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ch := e.channel(t)
	started, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	reports := make(chan amqpidem.Report, 5)
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() {
		runDone <- amqpidem.Consume(ctx, ch, g, amqpidem.Handle(func(ctx context.Context, d amqp.Delivery) ([]byte, error) {
			if calls.Add(1) == 1 {
				close(started)
				<-release
			}
			return nil, ctx.Err()
		}), amqpidem.Options{Queue: e.queue, DeadLetterRoutingKey: e.dlq, Prefetch: 5,
			OnResult: func(_ amqp.Delivery, r amqpidem.Report) { reports <- r }})
	}()
	<-started
	consumetest.ShutdownWaits(t, cancel, runDone, release)
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d handler calls, want 1: prefetched deliveries must not start after shutdown", n)
	}
	if r := <-reports; r.Action != idem.ActionAck || r.BrokerErr != nil {
		t.Fatalf("report = %+v, want an acked delivery", r)
	}
	// The prefetched deliveries were handed back while ch stays open: a
	// new consumer receives them, and only them.
	other := e.channel(t)
	ds, err := other.Consume(e.queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < 4 {
		select {
		case d := <-ds:
			if d.MessageId == "s-0" {
				t.Fatal("the acked delivery came back")
			}
			seen[d.MessageId] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of the 4 prefetched deliveries were requeued: %v", len(seen), seen)
		}
	}
}

// TestHandleTx runs the transactional inbox through the consumer while one
// of two consumers loses its connection before acking: business rows and
// markers commit together, a failed handler's rows roll back, and
// redeliveries and producer retries are skipped.
func TestHandleTx(t *testing.T) {
	e := newEnv(t)
	const unique = 300
	msgs := withRetries(unique, func(i int) amqp.Publishing {
		return amqp.Publishing{MessageId: fmt.Sprintf("tx-%d", i), Body: fmt.Appendf(nil, `{"n":%d}`, i)}
	})
	total := len(msgs)
	e.publishAll(t, msgs)

	store := consumetest.NewTxStore()
	var failedMu sync.Mutex
	failed := map[string]bool{}
	handler := func(crash func()) amqpidem.Handler {
		return amqpidem.HandleTx(func(ctx context.Context, tx *consumetest.Tx, d amqp.Delivery) ([]byte, error) {
			tx.Charge(d.MessageId)
			if crash != nil {
				crash()
			}
			var n int
			fmt.Sscanf(d.MessageId, "tx-%d", &n)
			failedMu.Lock()
			first := n%5 == 1 && !failed[d.MessageId]
			failed[d.MessageId] = true
			failedMu.Unlock()
			if first {
				return nil, errors.New("deadlock detected, try again") // rolls the charge back
			}
			return []byte("ok"), nil
		})
	}
	tr := newTracker(total)
	opts := amqpidem.Options{Queue: e.queue, DeadLetterRoutingKey: e.dlq, Concurrency: 4, Prefetch: 8,
		Backoff: idem.ExponentialBackoff(10*time.Millisecond, 50*time.Millisecond), OnResult: tr.onResult}
	newGuard := func() *idem.Guard {
		g, err := amqpidem.NewGuard(store, e.queue, idem.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	ch, g := e.channel(t), newGuard()
	xStarted := make(chan struct{}) // the other consumer joins once the crashing one is busy
	go func() {
		select {
		case <-xStarted:
		case <-ctx.Done():
		}
		runDone <- amqpidem.Consume(ctx, ch, g, handler(nil), opts)
	}()

	connX, chX := e.dial(t)
	var handledX atomic.Int64
	errX := make(chan error, 1)
	gX := newGuard()
	go func() {
		errX <- amqpidem.Consume(ctx, chX, gX, handler(func() {
			switch handledX.Add(1) {
			case 10:
				close(xStarted)
			case 50:
				connX.Close() // inside the transaction: it still commits, the ack is lost
			}
		}), opts)
	}()

	consumetest.AwaitSettled(t, tr.done, runDone, tr.settled, total)
	awaitCrashed(t, errX, &handledX)
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	consumetest.AppliedOnce(t, "committed", store.CommittedOrders(), unique)
	if d, want := tr.count(idem.OutcomeDuplicate), total-unique; d < want {
		t.Errorf("%d duplicates, want at least %d", d, want)
	}
	if tr.count(idem.OutcomeFailed) == 0 {
		t.Error("no handler failed: the rollback path was not exercised")
	}
}

// TestPublishCloudEvent: Publish sets the message-id and the CloudEvents
// AMQP headers; a guard keyed with idem.CloudEventsKey reads them, and the
// producer's retry is a duplicate.
func TestPublishCloudEvent(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pub := e.channel(t)
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := amqpidem.Publish(ctx, pub, "", e.queue, "evt-1", amqp.Publishing{Body: []byte(`{"total":5}`)},
			amqpidem.WithCloudEvent("/orders", "order.created"), amqpidem.WithHeader("tenant", "acme")); err != nil {
			t.Fatal(err)
		}
	}
	g, err := amqpidem.NewGuard(memory.New(), e.queue, idem.Options{Key: idem.CloudEventsKey})
	if err != nil {
		t.Fatal(err)
	}
	reports := make(chan amqpidem.Report, 2)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runDone := make(chan error, 1)
	ch := e.channel(t)
	var calls atomic.Int32
	go func() {
		runDone <- amqpidem.Consume(ctx, ch, g, amqpidem.Handle(func(ctx context.Context, d amqp.Delivery) ([]byte, error) {
			calls.Add(1)
			k, _ := idem.KeyFromContext(ctx)
			return []byte(k.ID), nil
		}), amqpidem.Options{Queue: e.queue, DeadLetterRoutingKey: e.dlq,
			OnResult: func(_ amqp.Delivery, r amqpidem.Report) { reports <- r }})
	}()
	r1, r2 := <-reports, <-reports
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 1 || r1.Result.Outcome != idem.OutcomeProcessed || r2.Result.Outcome != idem.OutcomeDuplicate ||
		string(r2.Result.Value) != "/orders|evt-1" || r2.Action != idem.ActionAck {
		t.Fatalf("calls %d, reports %+v / %+v; want one processed, one duplicate replaying key /orders|evt-1",
			calls.Load(), r1, r2)
	}
}

// TestMaxDeliveries: on a quorum queue, a delivery that keeps failing is
// dead-lettered with reason max_deliver on its last allowed attempt.
func TestMaxDeliveries(t *testing.T) {
	e := newEnv(t)
	quorum := e.queue + ".quorum"
	ch := e.channel(t)
	if _, err := ch.QueueDeclare(quorum, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ch, err := e.conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(quorum, false, false, false)
		}
	})
	pub := e.channel(t)
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	if err := amqpidem.Publish(context.Background(), pub, "", quorum, "flaky-1", amqp.Publishing{Body: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	g, err := amqpidem.NewGuard(memory.New(), quorum, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reports := make(chan amqpidem.Report, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	cch := e.channel(t)
	go func() {
		runDone <- amqpidem.Consume(ctx, cch, g, amqpidem.Handle(func(ctx context.Context, d amqp.Delivery) ([]byte, error) {
			return nil, errors.New("still down")
		}), amqpidem.Options{Queue: quorum, DeadLetterRoutingKey: e.dlq, MaxDeliveries: 3,
			Backoff:  func(int) time.Duration { return time.Millisecond },
			OnResult: func(_ amqp.Delivery, r amqpidem.Report) { reports <- r }})
	}()
	var actions []idem.Action
	for {
		r := <-reports
		actions = append(actions, r.Action)
		if r.Action == idem.ActionDeadLetter {
			if r.Reason != amqpidem.ReasonMaxDeliver || r.BrokerErr != nil {
				t.Fatalf("dead letter report %+v", r)
			}
			break
		}
		if len(actions) > 3 {
			t.Fatalf("actions %v: never dead-lettered", actions)
		}
	}
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(actions) != "[retry retry dead_letter]" {
		t.Fatalf("actions = %v, want two retries then the dead letter", actions)
	}
	dls := e.deadLetters(t)
	if len(dls) != 1 || amqpidem.HeaderString(dls[0].Headers[amqpidem.HeaderReason]) != "max_deliver" {
		t.Fatalf("dead letters = %v", dls)
	}
}
