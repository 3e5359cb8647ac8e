package integration_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/store/memory"
	amqp "github.com/rabbitmq/amqp091-go"
)

// recAck is an amqp.Acknowledger that records the action taken.
type recAck struct {
	mu      sync.Mutex
	actions []string
}

func (a *recAck) record(s string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.actions = append(a.actions, s)
	return nil
}
func (a *recAck) Ack(tag uint64, multiple bool) error { return a.record("ack") }
func (a *recAck) Nack(tag uint64, multiple, requeue bool) error {
	return a.record(fmt.Sprint("nack requeue=", requeue))
}
func (a *recAck) Reject(tag uint64, requeue bool) error { return a.record("reject") }
func (a *recAck) got() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return fmt.Sprint(a.actions)
}

func delivery(id string, body string, headers amqp.Table) (amqp.Delivery, *recAck) {
	a := &recAck{}
	return amqp.Delivery{Acknowledger: a, DeliveryTag: 1, MessageId: id, Body: []byte(body), Headers: headers}, a
}

// TestActions checks the AMQP action taken for acked and retried outcomes,
// and the hold before a requeue, without a server (dead letters need a
// channel: see TestEffectivelyOnce).
func TestActions(t *testing.T) {
	store := memory.New()
	g, err := amqpidem.NewGuard(store, "q", idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var attempts []int
	var mu sync.Mutex
	c, err := amqpidem.NewConsumer(new(amqp.Channel), g, amqpidem.Handle(func(ctx context.Context, d amqp.Delivery) ([]byte, error) {
		if string(d.Body) == "fail" {
			return nil, errors.New("timeout")
		}
		return nil, nil
	}), amqpidem.Options{Queue: "q", DeadLetterRoutingKey: "q.dlq", Backoff: func(attempt int) time.Duration {
		mu.Lock()
		attempts = append(attempts, attempt)
		mu.Unlock()
		return time.Millisecond
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, s := range []struct {
		id, body string
		headers  amqp.Table
		redeliv  bool
		want     string
	}{
		{"a", "ok", nil, false, "[ack]"},
		{"a", "ok", nil, true, "[ack]"}, // duplicate
		{"b", "fail", nil, false, "[nack requeue=true]"},
		{"b", "fail", nil, true, "[nack requeue=true]"},
		{"b", "fail", amqp.Table{"x-delivery-count": int64(4)}, true, "[nack requeue=true]"},
	} {
		d, a := delivery(s.id, s.body, s.headers)
		d.Redelivered = s.redeliv
		r := c.Process(ctx, d)
		if a.got() != s.want {
			t.Fatalf("step %d: actions %s, want %s (report %+v)", i, a.got(), s.want, r)
		}
	}
	if fmt.Sprint(attempts) != "[1 2 5]" {
		t.Fatalf("back-off attempts %v, want [1 2 5] (first delivery, redelivered, x-delivery-count 4)", attempts)
	}
}
