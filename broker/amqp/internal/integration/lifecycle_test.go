package integration_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
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
	reports := make(chan broker.Report, 5)
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
			Hooks: consumetest.ReportTo[amqp.Delivery](reports)})
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
	reports := make(chan broker.Report, 2)
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
			Hooks: consumetest.ReportTo[amqp.Delivery](reports)})
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
