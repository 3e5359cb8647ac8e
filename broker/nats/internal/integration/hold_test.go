package integration_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/internal/consumetest"
	"github.com/idemgo/idem/store/memory"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// holdCase is a consumer without a server whose first message's handler
// holds key "a" until release.
type holdCase struct {
	c     *natsidem.Consumer
	js    *recJS
	b     *consumetest.Blocker
	seen  <-chan struct{}
	first <-chan broker.Report
	lease time.Duration
}

// newHoldCase starts the holder. clock, when not nil, is the guard's clock.
func newHoldCase(t *testing.T, maxDeliver int, opts natsidem.Options, clock func() time.Time) *holdCase {
	t.Helper()
	cons := infoConsumer{info: &jetstream.ConsumerInfo{Stream: "S", Name: "c",
		Config: jetstream.ConsumerConfig{MaxDeliver: maxDeliver}}}
	obs, seen := consumetest.InProgressSeen()
	const lease = 30 * time.Second
	g, err := natsidem.NewGuard(memory.New(), cons, idem.Options{Lease: lease, Observer: obs, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	b := consumetest.NewBlocker()
	js := &recJS{}
	opts.JetStream, opts.DeadLetterSubject = js, "dlq"
	c, err := natsidem.NewConsumer(cons, g, consumetest.Handler[jetstream.Msg](b), opts)
	if err != nil {
		t.Fatal(err)
	}
	first := b.Hold(func() broker.Report {
		return c.Process(context.Background(), &recMsg{id: "a", data: []byte("1"), delivered: 1})
	})
	return &holdCase{c: c, js: js, b: b, seen: seen, first: first, lease: lease}
}

// duplicate processes a copy of the holder's message, delivered delivered
// times, in the background.
func (hc *holdCase) duplicate(ctx context.Context, delivered uint64) (*recMsg, <-chan broker.Report) {
	m := &recMsg{id: "a", data: []byte("1"), delivered: delivered, subject: "orders.x"}
	return m, consumetest.Go(func() broker.Report { return hc.c.Process(ctx, m) })
}

// finish releases the holder and checks that it was processed once.
func (hc *holdCase) finish(t *testing.T) {
	t.Helper()
	hc.b.Finish(t, hc.first)
}

// TestHoldBounded: past MaxHold the copy is nak'ed with the delay until
// the holder's lease ends (the guard's clock stands still, so that is the
// lease plus at most a second of jitter), not the attempt's back-off.
func TestHoldBounded(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	hc := newHoldCase(t, 0, natsidem.Options{MaxHold: 30 * time.Millisecond, Backoff: func(int) time.Duration { return time.Millisecond }}, func() time.Time { return now })
	defer hc.finish(t)
	m, done := hc.duplicate(context.Background(), 2)
	r := <-done
	min, max := hc.lease+10*time.Millisecond, hc.lease+10*time.Millisecond+time.Second
	if r.Action != idem.ActionRetry || r.Delay < min || r.Delay > max || m.got() != fmt.Sprintf("[nak %v]", r.Delay) {
		t.Fatalf("actions %s, report %+v; want a nak with a delay in [%v, %v]", m.got(), r, min, max)
	}
}

// TestHoldLastDelivery: on the consumer's last allowed delivery a copy is
// held past MaxHold, for as long as the holder runs, and never dead-lettered
// as max_deliver.
func TestHoldLastDelivery(t *testing.T) {
	hc := newHoldCase(t, 3, natsidem.Options{MaxHold: time.Millisecond, Backoff: func(int) time.Duration { return time.Millisecond }}, nil)
	m, done := hc.duplicate(context.Background(), 3)
	consumetest.AwaitHeld(t, hc.seen, 5, done) // five claims at least 10ms apart: past MaxHold
	hc.finish(t)
	if r := <-done; m.got() != "[ack]" || r.Result.Outcome != idem.OutcomeDuplicate {
		t.Fatalf("last delivery: actions %s, report %+v; want held, then acked as a duplicate", m.got(), r)
	}
}

// TestHoldShutdown: when Process's context ends during a hold, the copy is
// nak'ed with the delay until the holder's lease ends; on the last allowed
// delivery it is dead-lettered (reason max_deliver, the stored record in
// progress) rather than nak'ed, which JetStream would drop.
func TestHoldShutdown(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, last := range []bool{false, true} {
		t.Run(fmt.Sprint("last=", last), func(t *testing.T) {
			hc := newHoldCase(t, 3, natsidem.Options{Backoff: func(int) time.Duration { return time.Millisecond }},
				func() time.Time { return now })
			defer hc.finish(t)
			delivered := uint64(2)
			if last {
				delivered = 3
			}
			ctx, cancel := context.WithCancel(context.Background())
			m, done := hc.duplicate(ctx, delivered)
			consumetest.AwaitHeld(t, hc.seen, 2, done)
			cancel()
			r := <-done
			if !last {
				if r.Action != idem.ActionRetry || r.Delay < hc.lease || m.got() != fmt.Sprintf("[nak %v]", r.Delay) {
					t.Fatalf("actions %s, report %+v; want a nak until the lease ends", m.got(), r)
				}
				return
			}
			if r.Action != idem.ActionDeadLetter || r.Reason != natsidem.ReasonMaxDeliver || m.got() != "[term]" {
				t.Fatalf("actions %s, report %+v; want a max_deliver dead letter", m.got(), r)
			}
			hc.js.mu.Lock()
			dl := hc.js.dls[len(hc.js.dls)-1]
			hc.js.mu.Unlock()
			if dl.Header.Get(idem.HeaderReason) != "max_deliver" || dl.Header.Get(idem.HeaderStoredState) != "in_progress" {
				t.Fatalf("dead letter headers %v; want reason max_deliver and the stored record in progress", dl.Header)
			}
		})
	}
}

// tickConsumer calls tick for every InProgress a consumer sends.
type tickConsumer struct {
	jetstream.Consumer
	tick func(jetstream.Msg)
}

func (c tickConsumer) Messages(opts ...jetstream.PullMessagesOpt) (jetstream.MessagesContext, error) {
	it, err := c.Consumer.Messages(opts...)
	return tickIter{it, c.tick}, err
}

type tickIter struct {
	jetstream.MessagesContext
	tick func(jetstream.Msg)
}

func (it tickIter) Next(opts ...jetstream.NextOpt) (jetstream.Msg, error) {
	m, err := it.MessagesContext.Next(opts...)
	if err != nil {
		return nil, err
	}
	return tickMsg{m, it.tick}, nil
}

type tickMsg struct {
	jetstream.Msg
	tick func(jetstream.Msg)
}

func (m tickMsg) InProgress() error {
	err := m.Msg.InProgress()
	m.tick(m.Msg)
	return err
}

// limitedConsumer is a durable consumer with MaxDeliver 2 and a one-second
// AckWait: a message nak'ed once is on its last delivery.
func (e *env) limitedConsumer(t *testing.T, durable string) jetstream.Consumer {
	t.Helper()
	cons, err := e.js.CreateOrUpdateConsumer(context.Background(), e.stream, jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxDeliver: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	return cons
}

// publishOrder publishes an order keyed by its Order-Id header, without
// Nats-Msg-Id: JetStream stores every copy.
func (e *env) publishOrder(t *testing.T, id string, data []byte) {
	t.Helper()
	m := nats.NewMsg(e.subject + ".orders")
	m.Header.Set("Order-Id", id)
	m.Data = data
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// noRedelivery fails t unless cons delivered want messages, each once, and
// every one is acknowledged.
func noRedelivery(t *testing.T, cons jetstream.Consumer, want uint64) {
	t.Helper()
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Delivered.Consumer != want || info.NumRedelivered != 0 || info.NumAckPending != 0 {
		t.Fatalf("%d deliveries, %d redelivered, %d awaiting ack; want %d, 0, 0",
			info.Delivered.Consumer, info.NumRedelivered, info.NumAckPending, want)
	}
}

// TestProducerRetryDuringLongHandler (JetStream, MaxDeliver 2): a producer
// retry that arrives while the original's handler runs for longer than
// AckWait and the lease is held, kept in progress, and acked as a duplicate
// once the original completes. It spends no delivery and is never
// dead-lettered as max_deliver.
func TestProducerRetryDuringLongHandler(t *testing.T) {
	e := newEnv(t)
	cons := e.limitedConsumer(t, "retry")
	obs, seen := consumetest.InProgressSeen()
	g, err := natsidem.NewGuard(memory.New(), cons, idem.Options{
		Key: idem.HeaderKey("Order-Id"), Lease: 600 * time.Millisecond, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	e.publishOrder(t, "o-1", []byte(`{"amount":5}`))
	b := consumetest.NewBlocker()
	dupTicks := make(chan struct{}, 100)
	tick := func(m jetstream.Msg) {
		if seqOf(t, m) == 2 {
			select {
			case dupTicks <- struct{}{}:
			default:
			}
		}
	}
	reports := make(chan broker.Report, 10)
	dupReport := make(chan broker.Report, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() {
		runDone <- natsidem.Consume(ctx, tickConsumer{cons, tick}, g, consumetest.Handler[jetstream.Msg](b), natsidem.Options{Concurrency: 2, Backoff: func(int) time.Duration { return 10 * time.Millisecond }, Hooks: broker.Hooks[jetstream.Msg]{AfterSettle: func(_ context.Context, m jetstream.Msg, r broker.Report) {
			if seqOf(t, m) == 2 {
				dupReport <- r
			} else {
				reports <- r
			}
		}}, JetStream: e.js, DeadLetterSubject: e.dlq, DoubleAck: true})
	}()
	<-b.Started
	e.publishOrder(t, "o-1", []byte(`{"amount":5}`)) // the producer's retry
	// Held across two AckWaits (four keep-alives) and several leases the
	// holder renewed.
	consumetest.AwaitHeld(t, seen, 3, dupReport)
	for range 4 {
		select {
		case <-dupTicks:
		case r := <-dupReport:
			t.Fatalf("the retry was settled while the original ran: %+v", r)
		}
	}
	b.Finish(t, reports)
	r := <-dupReport
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	if r.Action != idem.ActionAck || r.Result.Outcome != idem.OutcomeDuplicate || r.BrokerErr != nil {
		t.Fatalf("retry: %+v; want held, then acked as a duplicate", r)
	}
	if dls := e.deadLetters(t); len(dls) != 0 {
		t.Fatalf("dead letters: %v", dls[0].Header)
	}
	noRedelivery(t, cons, 2)
}

// TestShutdownWhileHeld: Run's shutdown naks a held message at once, with
// the delay until the holder's lease ends, and returns.
func TestShutdownWhileHeld(t *testing.T) {
	e := newEnv(t)
	cons := e.consumer(t, "held", 30*time.Second)
	obs, seen := consumetest.InProgressSeen()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const lease = 20 * time.Second
	g, err := natsidem.NewGuard(memory.New(), cons, idem.Options{Key: idem.HeaderKey("Order-Id"), Lease: lease,
		Observer: obs, Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"amount":9}`)
	// Another instance holds the key, with a live lease.
	consumetest.HoldElsewhere(t, g, idem.Message{Headers: map[string]string{"Order-Id": "o-3"}, Payload: body})
	e.publishOrder(t, "o-3", body)
	reports := make(chan broker.Report, 1)
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() {
		runDone <- natsidem.Consume(ctx, cons, g, natsidem.Handle(func(context.Context, jetstream.Msg) ([]byte, error) {
			return nil, errors.New("the holder is alive: never called")
		}), natsidem.Options{Backoff: func(int) time.Duration { return 10 * time.Millisecond }, Hooks: consumetest.ReportTo[jetstream.Msg](reports), JetStream: e.js, DeadLetterSubject: e.dlq})
	}()
	consumetest.AwaitHeld(t, seen, 2, reports)
	cancel()
	if err := <-runDone; err != nil {
		t.Fatalf("Run = %v", err)
	}
	r := <-reports
	if r.Action != idem.ActionRetry || !errors.Is(r.Err, idem.ErrInProgress) || r.BrokerErr != nil ||
		r.Delay < lease || r.Delay > lease+time.Second+10*time.Millisecond {
		t.Fatalf("report %+v; want a nak until the holder's lease ends (%v)", r, lease)
	}
}
