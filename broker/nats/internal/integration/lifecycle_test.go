package integration_test

import (
	"context"
	"errors"
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

func pending(t *testing.T, cons jetstream.Consumer) (ackPending int, numPending uint64) {
	t.Helper()
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.NumAckPending, info.NumPending
}

// TestGracefulShutdown cancels Run while a handler is in flight: Run must
// wait for it, ack its message (DoubleAck: confirmed by the server) and
// return nil.
func TestGracefulShutdown(t *testing.T) {
	e := newEnv(t)
	if _, err := natsidem.Publish(context.Background(), e.js, e.subject+".x", "only-one", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	cons := e.consumer(t, "shutdown", 30*time.Second)
	g, err := natsidem.NewGuard(memory.New(), cons, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	reports := make(chan broker.Report, 1)
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() {
		runDone <- natsidem.Consume(ctx, cons, g, natsidem.Handle(func(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
			close(started)
			<-release
			return nil, ctx.Err() // the handler's context outlives Run's
		}), natsidem.Options{Hooks: consumetest.ReportTo[jetstream.Msg](reports), JetStream: e.js, DeadLetterSubject: e.dlq, DoubleAck: true})
	}()
	<-started
	consumetest.ShutdownWaits(t, cancel, runDone, release)
	r := <-reports
	if r.Action != idem.ActionAck || r.BrokerErr != nil || r.Result.Outcome != idem.OutcomeProcessed {
		t.Fatalf("report = %+v, want a processed, acked message", r)
	}
	if ack, num := pending(t, cons); ack != 0 || num != 0 {
		t.Fatalf("after shutdown: %d awaiting ack, %d pending; want 0, 0", ack, num)
	}
}

// TestShutdownTimeout: a handler that does not finish within
// ShutdownTimeout has its context cancelled; its claim is released and the
// message is nak'ed for another consumer, not acked.
func TestShutdownTimeout(t *testing.T) {
	e := newEnv(t)
	if _, err := natsidem.Publish(context.Background(), e.js, e.subject+".x", "slow", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	cons := e.consumer(t, "slow", 30*time.Second)
	store := memory.New()
	g, err := natsidem.NewGuard(store, cons, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	reports := make(chan broker.Report, 1)
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() {
		runDone <- natsidem.Consume(ctx, cons, g, natsidem.Handle(func(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		}), natsidem.Options{ShutdownTimeout: 10 * time.Millisecond, Backoff: func(int) time.Duration { return time.Hour }, Hooks: consumetest.ReportTo[jetstream.Msg](reports), JetStream: e.js, DeadLetterSubject: e.dlq})
	}()
	<-started
	cancel()
	if err := <-runDone; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	r := <-reports
	if r.Action != idem.ActionRetry || r.Delay != time.Hour || !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("report = %+v, want a retry of the cancelled handler", r)
	}
	rec, err := store.Get(context.Background(), idem.Key{Scope: g.Options().Scope, ID: "slow"})
	if err != nil || rec.State != idem.StateReleased {
		t.Fatalf("record = %+v, %v after a cancelled handler; want it released", rec, err)
	}
}

// TestDeadLetterUnavailable: when the dead-letter subject has no stream the
// message is not terminated; once the stream exists it is dead-lettered.
func TestDeadLetterUnavailable(t *testing.T) {
	e := newEnv(t)
	if err := e.js.DeleteStream(context.Background(), e.stream+"_DLQ"); err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(e.subject + ".x") // no Nats-Msg-Id: no key
	m.Data = []byte(`{"x":1}`)
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	cons := e.consumer(t, "dlq", 30*time.Second)
	g, err := natsidem.NewGuard(memory.New(), cons, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reports := make(chan broker.Report, 100)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() {
		runDone <- natsidem.Consume(ctx, cons, g, natsidem.Handle(func(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
			return nil, nil
		}), natsidem.Options{Backoff: func(int) time.Duration { return 20 * time.Millisecond }, Hooks: consumetest.ReportTo[jetstream.Msg](reports), JetStream: e.js, DeadLetterSubject: e.dlq})
	}()
	r := <-reports
	if r.Action != idem.ActionDeadLetter || r.BrokerErr == nil || r.Reason != "no_key" {
		t.Fatalf("first report = %+v, want a failed dead letter", r)
	}
	if _, err := e.js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: e.stream + "_DLQ", Subjects: []string{e.dlq}, Storage: jetstream.MemoryStorage,
	}); err != nil {
		t.Fatal(err)
	}
	for r.BrokerErr != nil {
		select {
		case r = <-reports:
		case <-time.After(20 * time.Second):
			t.Fatal("the message was never dead-lettered")
		}
	}
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	dls := e.deadLetters(t)
	if len(dls) != 1 || hdr(dls[0], natsidem.HeaderReason) != "no_key" {
		t.Fatalf("dead letters = %d (%v), want one with reason no_key", len(dls), dls)
	}
}

// TestPublishCloudEvent: Publish sets Nats-Msg-Id (a retry inside the
// window is dropped by the server) and CloudEvents headers that a guard
// keyed with idem.CloudEventsKey reads.
func TestPublishCloudEvent(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for i, wantDup := range []bool{false, true} {
		ack, err := natsidem.Publish(ctx, e.js, e.subject+".ce", "evt-1", []byte(`{"total":5}`),
			natsidem.WithCloudEvent("/orders", "order.created"), natsidem.WithContentType("application/json"))
		if err != nil {
			t.Fatal(err)
		}
		if ack.Duplicate != wantDup {
			t.Fatalf("publish %d: Duplicate = %v, want %v", i, ack.Duplicate, wantDup)
		}
	}
	cons := e.consumer(t, "ce", 30*time.Second)
	g, err := natsidem.NewGuard(memory.New(), cons, idem.Options{Key: idem.CloudEventsKey})
	if err != nil {
		t.Fatal(err)
	}
	reports := make(chan broker.Report, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runDone := make(chan error, 1)
	go func() {
		runDone <- natsidem.Consume(ctx, cons, g, natsidem.Handle(func(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
			k, _ := idem.KeyFromContext(ctx)
			return []byte(k.ID), nil
		}), natsidem.Options{Hooks: consumetest.ReportTo[jetstream.Msg](reports), JetStream: e.js, DeadLetterSubject: e.dlq})
	}()
	r := <-reports
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	if r.Action != idem.ActionAck || string(r.Result.Value) != "/orders|evt-1" || g.Options().Scope != e.stream+"/ce" {
		t.Fatalf("report = %+v (scope %q), want the CloudEvents key processed", r, g.Options().Scope)
	}
}

// TestKeepAlive: a handler running for several AckWaits keeps its message
// (the consumer sends InProgress), so it is delivered once.
func TestKeepAlive(t *testing.T) {
	e := newEnv(t)
	if _, err := natsidem.Publish(context.Background(), e.js, e.subject+".x", "long-1", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	cons := e.consumer(t, "long", 300*time.Millisecond)
	g, err := natsidem.NewGuard(memory.New(), cons, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ticks := make(chan struct{})
	reports := make(chan broker.Report, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() {
		runDone <- natsidem.Consume(ctx, tickConsumer{cons, func(jetstream.Msg) {
			select {
			case ticks <- struct{}{}:
			default:
			}
		}}, g, natsidem.Handle(func(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
			for range 6 { // three AckWaits
				<-ticks
			}
			return nil, nil
		}), natsidem.Options{Concurrency: 2, Hooks: consumetest.ReportTo[jetstream.Msg](reports), JetStream: e.js, DeadLetterSubject: e.dlq, DoubleAck: true})
	}()
	r := <-reports
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	if r.Action != idem.ActionAck || r.BrokerErr != nil {
		t.Fatalf("report = %+v", r)
	}
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Delivered.Consumer != 1 {
		t.Fatalf("%d deliveries, want 1: the long handler's message was redelivered", info.Delivered.Consumer)
	}
}

// TestConnectionClosed: Run returns an error wrapping
// jetstream.ErrMsgIteratorClosed when its connection closes.
func TestConnectionClosed(t *testing.T) {
	e := newEnv(t)
	if _, err := natsidem.Publish(context.Background(), e.js, e.subject+".x", "c-1", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(e.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	e.consumer(t, "closing", 30*time.Second)
	cons, err := js.Consumer(context.Background(), e.stream, "closing")
	if err != nil {
		t.Fatal(err)
	}
	g, err := natsidem.NewGuard(memory.New(), cons, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reports := make(chan broker.Report, 1)
	runDone := make(chan error, 1)
	go func() {
		runDone <- natsidem.Consume(context.Background(), cons, g, natsidem.Handle(func(context.Context, jetstream.Msg) ([]byte, error) {
			return nil, nil
		}), natsidem.Options{Hooks: consumetest.ReportTo[jetstream.Msg](reports), JetStream: js, DeadLetterSubject: e.dlq})
	}()
	<-reports
	nc.Close()
	if err := <-runDone; !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
		t.Fatalf("Run = %v, want ErrMsgIteratorClosed", err)
	}
}
