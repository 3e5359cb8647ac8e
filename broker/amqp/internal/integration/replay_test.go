package integration_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/store/memory"
)

// TestReplay (quorum queue, MaxDeliveries 2): two messages are
// dead-lettered as max_deliver after their handler failed on both allowed
// deliveries (their records released, never completed). A producer re-send
// of one of them is processed afterwards. Replayed, each dead letter is
// published to its original exchange and routing key with the original's
// message-id, correlation-id, timestamp and headers and none of idem's; the
// consumer's record decides: the one processed meanwhile is acked as a
// duplicate, the one never completed is processed.
func TestReplay(t *testing.T) {
	e := newEnv(t)
	q := e.quorum(t, 5)
	g, err := amqpidem.NewGuard(memory.New(), q, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var broken atomic.Bool
	broken.Store(true)
	var (
		mu      sync.Mutex
		applied = map[string]int{}
	)
	dead := make(chan struct{}, 2)
	results, stop := e.consume(t, g, amqpidem.Handle(func(ctx context.Context, d amqp.Delivery) ([]byte, error) {
		if broken.Load() {
			return nil, errors.New("downstream down")
		}
		mu.Lock()
		defer mu.Unlock()
		applied[d.MessageId]++
		return nil, nil
	}), amqpidem.Options{Queue: q, MaxDeliveries: 2, Backoff: fastBackoff,
		Hooks: broker.Hooks[amqp.Delivery]{OnDeadLetter: func(context.Context, amqp.Delivery, broker.Report) { dead <- struct{}{} }}})
	pub := e.channel(t)
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sent := map[string]amqp.Publishing{
		"a": {Body: []byte(`{"n":1}`), CorrelationId: "flow-1", ContentType: "application/json", Headers: amqp.Table{"tenant": "acme"}},
		"b": {Body: []byte(`{"n":2}`)},
	}
	for _, id := range []string{"a", "b"} {
		if err := amqpidem.Publish(ctx, pub, "", q, id, sent[id]); err != nil {
			t.Fatal(err)
		}
	}
	<-dead
	<-dead
	acked := func() result {
		for {
			if res := <-results; res.r.Action == idem.ActionAck {
				return res
			}
		}
	}

	broken.Store(false)
	if err := amqpidem.Publish(ctx, pub, "", q, "b", sent["b"]); err != nil { // b re-sent
		t.Fatal(err)
	}
	if res := acked(); res.r.Result.Outcome != idem.OutcomeProcessed {
		t.Fatalf("the re-send of b: %+v, want processed", res.r)
	}
	dls := e.deadLetters(t)
	if len(dls) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dls))
	}
	for _, dl := range dls {
		if r := amqpidem.HeaderString(dl.Headers[idem.HeaderReason]); r != broker.ReasonMaxDeliver {
			t.Fatalf("dead letter reason %q, want max_deliver", r)
		}
		if err := amqpidem.Replay(ctx, pub, dl); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]result{}
	for range 2 {
		res := acked()
		got[res.d.MessageId] = res
	}
	stop()
	if got["a"].r.Result.Outcome != idem.OutcomeProcessed || got["b"].r.Result.Outcome != idem.OutcomeDuplicate {
		t.Errorf("replayed a %v, b %v; want processed, duplicate", got["a"].r.Result.Outcome, got["b"].r.Result.Outcome)
	}
	mu.Lock()
	if applied["a"] != 1 || applied["b"] != 1 {
		t.Errorf("applied %v, want a and b once each", applied)
	}
	mu.Unlock()
	for id, res := range got {
		d := res.d
		for k := range d.Headers {
			if strings.HasPrefix(k, "x-idem-") || strings.HasPrefix(k, "Idem-") || k == "x-delivery-count" {
				t.Errorf("replayed %s carries %s: %v", id, k, d.Headers)
			}
		}
		if d.Timestamp.IsZero() || d.Headers[amqpidem.HeaderDedup] == nil {
			t.Errorf("replayed %s: timestamp %v, headers %v; want the original's", id, d.Timestamp, d.Headers)
		}
	}
	if a := got["a"].d; a.CorrelationId != "flow-1" || a.ContentType != "application/json" ||
		amqpidem.HeaderString(a.Headers["tenant"]) != "acme" || len(a.Headers) != 2 {
		t.Errorf("replayed a: correlation-id %q, content type %q, headers %v; want the original's", a.CorrelationId, a.ContentType, a.Headers)
	}
	if err := amqpidem.Replay(ctx, pub, amqp.Delivery{MessageId: "x"}); !errors.Is(err, amqpidem.ErrNotDeadLetter) {
		t.Fatalf("Replay of a plain delivery: %v, want ErrNotDeadLetter", err)
	}
}
