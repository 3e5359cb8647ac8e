package integration_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/internal/consumetest"
	"github.com/idemgo/idem/store/memory"
	amqp "github.com/rabbitmq/amqp091-go"
)

// holdCase is a consumer without a server whose first delivery's handler
// holds key "a" until release.
type holdCase struct {
	c     *amqpidem.Consumer
	b     *consumetest.Blocker
	seen  <-chan struct{}
	first <-chan broker.Report
	lease time.Duration
	// planned receives the report of each delivery as BeforeSettle sees
	// it: the action decided, before the engine waits out a requeue's
	// delay (RabbitMQ cannot delay one).
	planned <-chan broker.Report
}

func newHoldCase(t *testing.T, opts amqpidem.Options, clock func() time.Time) *holdCase {
	t.Helper()
	obs, seen := consumetest.InProgressSeen()
	const lease = 30 * time.Second
	g, err := amqpidem.NewGuard(memory.New(), "q", idem.Options{Lease: lease, Observer: obs, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	b := consumetest.NewBlocker()
	opts.Queue, opts.DeadLetterRoutingKey = "q", "q.dlq"
	planned := make(chan broker.Report, 2)
	opts.Hooks.BeforeSettle = func(_ context.Context, _ amqp.Delivery, r broker.Report) { planned <- r }
	c, err := amqpidem.NewConsumer(new(amqp.Channel), g, consumetest.Handler[amqp.Delivery](b), opts)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := delivery("a", "1", nil)
	first := b.Hold(func() broker.Report { return c.Process(context.Background(), d) })
	return &holdCase{c: c, b: b, seen: seen, first: first, lease: lease, planned: planned}
}

// duplicate processes a copy of the holder's delivery in the background.
func (hc *holdCase) duplicate(ctx context.Context, headers amqp.Table) (*recAck, <-chan broker.Report) {
	d, a := delivery("a", "1", headers)
	d.Redelivered = headers != nil
	return a, consumetest.Go(func() broker.Report { return hc.c.Process(ctx, d) })
}

func (hc *holdCase) finish(t *testing.T) {
	t.Helper()
	hc.b.Finish(t, hc.first)
}

var fastBackoff = func(int) time.Duration { return time.Millisecond }

// TestHoldBounded: the copy is claimed again until MaxHold, then requeued
// after the holder's lease (the engine holds it unacked for that delay,
// RabbitMQ having none of its own), or at once when ctx ends first.
func TestHoldBounded(t *testing.T) {
	hc := newHoldCase(t, amqpidem.Options{MaxHold: 50 * time.Millisecond, Backoff: fastBackoff}, nil)
	defer hc.finish(t)
	ctx, cancel := context.WithCancel(context.Background())
	a, done := hc.duplicate(ctx, nil)
	consumetest.AwaitHeld(t, hc.seen, 3, done)
	// ctx is live: only MaxHold ends the hold.
	if p := <-hc.planned; p.Action != idem.ActionRetry || p.Delay <= 0 || p.Delay > hc.lease+time.Second+10*time.Millisecond {
		t.Fatalf("planned %+v; want a requeue after the holder's lease (%v)", p, hc.lease)
	}
	cancel()
	if r := <-done; a.got() != "[nack requeue=true]" || r.Action != idem.ActionRetry {
		t.Fatalf("actions %s, report %+v; want one requeue", a.got(), r)
	}
}

// TestNeverHeld: with a negative MaxHold the copy is not claimed again; its
// requeue waits for the holder's lease (here ended by the context), not
// the attempt's back-off.
func TestNeverHeld(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	hc := newHoldCase(t, amqpidem.Options{MaxHold: -1, Backoff: fastBackoff}, func() time.Time { return now })
	defer hc.finish(t)
	ctx, cancel := context.WithCancel(context.Background())
	a, done := hc.duplicate(ctx, nil)
	consumetest.AwaitHeld(t, hc.seen, 1, done)
	if p := <-hc.planned; p.Action != idem.ActionRetry || p.Delay < hc.lease || p.Delay > hc.lease+time.Second+10*time.Millisecond {
		t.Fatalf("planned %+v; want a requeue after the holder's lease (%v)", p, hc.lease)
	}
	cancel()
	if r := <-done; a.got() != "[nack requeue=true]" || r.Delay >= hc.lease {
		t.Fatalf("actions %s, report %+v; want a requeue once ctx ended, before the lease", a.got(), r)
	}
}

// TestHoldLastDelivery: on the MaxDeliveries-th attempt a copy is held past
// MaxHold, for as long as the holder runs, and never dead-lettered as
// max_deliver.
func TestHoldLastDelivery(t *testing.T) {
	hc := newHoldCase(t, amqpidem.Options{MaxHold: time.Millisecond, MaxDeliveries: 3, Backoff: fastBackoff}, nil)
	a, done := hc.duplicate(context.Background(), amqp.Table{"x-delivery-count": int64(2)})
	consumetest.AwaitHeld(t, hc.seen, 5, done)
	hc.finish(t)
	if r := <-done; a.got() != "[ack]" || r.Result.Outcome != idem.OutcomeDuplicate {
		t.Fatalf("last delivery: actions %s, report %+v; want held, then acked as a duplicate", a.got(), r)
	}
}

// TestClassicRedeliveryNotLast: a classic queue's redelivery (the flag, no
// x-delivery-count) is attempt 2 at least, but a classic queue has no
// delivery limit, so with MaxDeliveries 2 it is not the last: past MaxHold
// it is requeued, not held on nor dead-lettered.
func TestClassicRedeliveryNotLast(t *testing.T) {
	hc := newHoldCase(t, amqpidem.Options{MaxHold: time.Millisecond, MaxDeliveries: 2, Backoff: fastBackoff}, nil)
	defer hc.finish(t)
	ctx, cancel := context.WithCancel(context.Background())
	a, done := hc.duplicate(ctx, amqp.Table{}) // redelivered, uncounted
	consumetest.AwaitHeld(t, hc.seen, 1, done)
	if p := <-hc.planned; p.Action != idem.ActionRetry || p.Attempt != 2 {
		t.Fatalf("planned %+v; want a requeue of attempt 2", p)
	}
	cancel()
	if r := <-done; a.got() != "[nack requeue=true]" {
		t.Fatalf("actions %s, report %+v; want one requeue", a.got(), r)
	}
}

// renewStore signals every lease renewal.
type renewStore struct {
	*memory.Store
	renewed chan struct{}
}

func (s renewStore) Renew(ctx context.Context, req idem.RenewRequest) error {
	err := s.Store.Renew(ctx, req)
	select {
	case s.renewed <- struct{}{}:
	default:
	}
	return err
}

// quorum declares a quorum queue with a delivery-limit of limit (RabbitMQ
// dead-letters or drops a message returned more often), deleted at the end.
func (e *env) quorum(t *testing.T, limit int) string {
	t.Helper()
	q := e.queue + ".quorum"
	ch := e.channel(t)
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(limit)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ch, err := e.conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
	})
	return q
}

// queued is how many messages queue holds ready (not delivered).
func (e *env) queued(t *testing.T, queue string) int {
	t.Helper()
	ch := e.channel(t)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// publishTo publishes msgs to queue and waits for the confirms.
func (e *env) publishTo(t *testing.T, queue string, msgs ...amqp.Publishing) {
	t.Helper()
	ch := e.channel(t)
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false, m)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
			t.Fatalf("publish not confirmed: %v", err)
		}
	}
}

type result struct {
	d amqp.Delivery
	r broker.Report
}

// consume runs a consumer of queue with opts until the test ends; reports
// arrive on the returned channel.
func (e *env) consume(t *testing.T, g *idem.Guard, h amqpidem.Handler, opts amqpidem.Options) (<-chan result, func()) {
	t.Helper()
	results := make(chan result, 10)
	opts.DeadLetterRoutingKey = e.dlq
	opts.Hooks.AfterSettle = func(_ context.Context, d amqp.Delivery, r broker.Report) { results <- result{d, r} }
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	ch := e.channel(t)
	go func() { runDone <- amqpidem.Consume(ctx, ch, g, h, opts) }()
	stop := func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Consume = %v", err)
		}
	}
	return results, stop
}

// TestProducerRetryDuringLongHandler (quorum queue, delivery-limit 1,
// MaxDeliveries 2): a producer retry that arrives while the original's
// handler runs is held, not requeued, and acked as a duplicate once the
// original completes: it is delivered once, never dead-lettered as
// max_deliver nor by RabbitMQ.
func TestProducerRetryDuringLongHandler(t *testing.T) {
	e := newEnv(t)
	q := e.quorum(t, 1)
	obs, seen := consumetest.InProgressSeen()
	store := renewStore{memory.New(), make(chan struct{}, 100)}
	g, err := amqpidem.NewGuard(store, q, idem.Options{Lease: 300 * time.Millisecond, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	b := consumetest.NewBlocker()
	results, stop := e.consume(t, g, consumetest.Handler[amqp.Delivery](b), amqpidem.Options{Queue: q, Prefetch: 4, Concurrency: 2, MaxDeliveries: 2,
		Backoff: func(int) time.Duration { return 10 * time.Millisecond }})
	order := amqp.Publishing{MessageId: "o-1", Body: []byte(`{"amount":5}`)}
	e.publishTo(t, q, order)
	<-b.Started
	e.publishTo(t, q, order) // the producer's retry
	// Held while the holder renews its lease three times (Lease/3 apart:
	// the last one at the end of the lease the retry first saw), and
	// claimed again after that.
	consumetest.AwaitHeld(t, seen, 1, results)
	for drained := false; !drained; {
		select {
		case <-store.renewed:
		default:
			drained = true
		}
	}
	for range 3 {
		select {
		case <-store.renewed:
		case res := <-results:
			t.Fatalf("the retry was settled while the original ran: %+v", res.r)
		}
	}
	consumetest.AwaitHeld(t, seen, 1, results)
	close(b.Release)
	outcomes := map[idem.Outcome]int{}
	for range 2 {
		res := <-results
		if res.r.Action != idem.ActionAck || res.r.BrokerErr != nil || res.d.Redelivered {
			t.Fatalf("report %+v (redelivered %v); want acked on its first delivery", res.r, res.d.Redelivered)
		}
		outcomes[res.r.Result.Outcome]++
	}
	stop()
	if outcomes[idem.OutcomeProcessed] != 1 || outcomes[idem.OutcomeDuplicate] != 1 || b.Calls() != 1 {
		t.Fatalf("outcomes %v, %d handler calls; want one processed and the held duplicate", outcomes, b.Calls())
	}
	if dls := e.deadLetters(t); len(dls) != 0 {
		t.Fatalf("dead letters: %v", dls[0].Headers)
	}
	if n := e.queued(t, q); n != 0 {
		t.Fatalf("%d messages left in the queue", n)
	}
}

// TestShutdownWhileHeld: Run's shutdown requeues a held delivery at once
// (after cancelling the consumer) and returns; the message is back in the
// queue.
func TestShutdownWhileHeld(t *testing.T) {
	e := newEnv(t)
	q := e.quorum(t, 5)
	obs, seen := consumetest.InProgressSeen()
	g, err := amqpidem.NewGuard(memory.New(), q, idem.Options{Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"amount":9}`)
	consumetest.HoldElsewhere(t, g, idem.Message{ID: "o-3", Payload: body}) // another instance, with a live lease
	results, stop := e.consume(t, g, amqpidem.Handle(func(context.Context, amqp.Delivery) ([]byte, error) {
		return nil, errors.New("the holder is alive: never called")
	}), amqpidem.Options{Queue: q, Backoff: func(int) time.Duration { return 10 * time.Millisecond }})
	e.publishTo(t, q, amqp.Publishing{MessageId: "o-3", Body: body})
	consumetest.AwaitHeld(t, seen, 2, results)
	stop()
	res := <-results
	if res.r.Action != idem.ActionRetry || !errors.Is(res.r.Err, idem.ErrInProgress) || res.r.BrokerErr != nil || res.r.Delay != 0 {
		t.Fatalf("report %+v; want a requeue at once", res.r)
	}
	// Back in the queue: another consumer receives it.
	ds, err := e.channel(t).Consume(q, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-ds:
		if d.MessageId != "o-3" || !d.Redelivered {
			t.Fatalf("received %q (redelivered %v), want o-3 requeued", d.MessageId, d.Redelivered)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held delivery was not requeued")
	}
}
