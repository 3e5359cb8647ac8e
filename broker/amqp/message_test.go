package amqpidem_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/store/memory"
	amqp "github.com/rabbitmq/amqp091-go"
)

func TestMessageOfKeys(t *testing.T) {
	g := func(key idem.KeyFunc) *idem.Guard {
		g, err := amqpidem.NewGuard(memory.New(), "orders", idem.Options{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		if g.Options().Scope != "orders" {
			t.Fatalf("scope %q, want the queue name", g.Options().Scope)
		}
		return g
	}
	tests := []struct {
		name    string
		key     idem.KeyFunc
		d       amqp.Delivery
		want    string
		wantErr error
	}{
		{"message-id by default", nil, amqp.Delivery{MessageId: "order-1", DeliveryTag: 7}, "order-1", nil},
		{"never the delivery tag", nil, amqp.Delivery{DeliveryTag: 7, Redelivered: true}, "", idem.ErrNoKey},
		{"CloudEvents colon prefix", idem.CloudEventsKey,
			amqp.Delivery{Headers: amqp.Table{"cloudEvents:id": "e1", "cloudEvents:source": "/orders"}}, "/orders|e1", nil},
		{"CloudEvents underscore prefix", idem.CloudEventsKey,
			amqp.Delivery{Headers: amqp.Table{"cloudEvents_id": []byte("e2"), "cloudEvents_source": "/orders"}}, "/orders|e2", nil},
		{"CloudEvents structured", idem.CloudEventsKey,
			amqp.Delivery{ContentType: "application/cloudevents+json",
				Body: []byte(`{"specversion":"1.0","id":"e3","source":"/s","type":"t"}`)}, "/s|e3", nil},
		{"CloudEvents without source", idem.CloudEventsKey,
			amqp.Delivery{Headers: amqp.Table{"cloudEvents:id": "e4", "cloudEvents:specversion": "1.0"}}, "", idem.ErrInvalidKey},
		{"numeric header key", idem.HeaderKey("order-id"),
			amqp.Delivery{Headers: amqp.Table{"order-id": int64(42)}}, "42", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := g(tt.key).Key(amqpidem.MessageOf(tt.d))
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && k.ID != tt.want) {
				t.Fatalf("key = %q, %v; want %q, %v", k.ID, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestHeaderString(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	tests := []struct {
		in   any
		want string
	}{
		{nil, ""}, {"s", "s"}, {[]byte("b"), "b"}, {true, "true"},
		{int8(-8), "-8"}, {int16(16), "16"}, {int32(32), "32"}, {int64(-64), "-64"}, {int(7), "7"},
		{uint8(8), "8"}, {uint16(16), "16"}, {uint32(32), "32"}, {uint64(64), "64"},
		{float32(1.5), "1.5"}, {float64(2.25), "2.25"},
		{ts, "2026-01-02T02:04:05Z"},
		{amqp.Decimal{Scale: 2, Value: 1234}, "{2 1234}"},
	}
	for _, tt := range tests {
		if got := amqpidem.HeaderString(tt.in); got != tt.want {
			t.Errorf("HeaderString(%#v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestMessageOfFields(t *testing.T) {
	m := amqpidem.MessageOf(amqp.Delivery{MessageId: "id-1", ContentType: "application/json", CorrelationId: "flow-7",
		Headers: amqp.Table{"n": int32(3)}, Body: []byte(`{"a":1}`)})
	if m.ID != "id-1" || m.ContentType != "application/json" || m.Headers["n"] != "3" || string(m.Payload) != `{"a":1}` ||
		m.CorrelationID != "flow-7" {
		t.Fatalf("MessageOf = %+v", m)
	}
}

func TestNewConsumerValidation(t *testing.T) {
	g, err := idem.New(memory.New(), idem.Options{Scope: "q"})
	if err != nil {
		t.Fatal(err)
	}
	h := amqpidem.Handle(func(context.Context, amqp.Delivery) ([]byte, error) { return nil, nil })
	ch := new(amqp.Channel) // never used: validation fails first
	ok := amqpidem.Options{Queue: "q", DeadLetterRoutingKey: "q.dlq"}
	tests := []struct {
		name string
		ch   *amqp.Channel
		g    *idem.Guard
		h    amqpidem.Handler
		opts amqpidem.Options
	}{
		{"nil channel", nil, g, h, ok},
		{"nil guard", ch, nil, h, ok},
		{"nil handler", ch, g, amqpidem.Handle(nil), ok},
		{"nil tx handler", ch, g, amqpidem.HandleTx[*sql.Tx](nil), ok},
		{"no queue", ch, g, h, amqpidem.Options{DeadLetterRoutingKey: "q.dlq"}},
		{"no dead-letter destination", ch, g, h, amqpidem.Options{Queue: "q"}},
		{"negative prefetch", ch, g, h, amqpidem.Options{Queue: "q", DeadLetterExchange: "dlx", Prefetch: -1}},
		{"dead letters into the consumed queue", ch, g, h, amqpidem.Options{Queue: "q", DeadLetterRoutingKey: "q"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := amqpidem.NewConsumer(tt.ch, tt.g, tt.h, tt.opts); !errors.Is(err, idem.ErrInvalidOptions) {
				t.Fatalf("err = %v, want ErrInvalidOptions", err)
			}
		})
	}
}

// TestNewGuardScope: the scope is the queue unless set; with neither there
// is none to take.
func TestNewGuardScope(t *testing.T) {
	if g, err := amqpidem.NewGuard(memory.New(), "orders", idem.Options{Scope: "billing"}); err != nil || g.Options().Scope != "billing" {
		t.Fatalf("set scope: %v, %v; want it kept", g, err)
	}
	if _, err := amqpidem.NewGuard(memory.New(), "", idem.Options{}); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Fatalf("no queue, no scope: %v, want ErrInvalidOptions", err)
	}
}

func TestPublishNeedsID(t *testing.T) {
	if err := amqpidem.Publish(context.Background(), nil, "", "q", "", amqp.Publishing{}); !errors.Is(err, idem.ErrNoKey) {
		t.Fatalf("err = %v, want ErrNoKey", err)
	}
}

func TestHandleTxNeedsTxStore(t *testing.T) {
	g, err := idem.New(memory.New(), idem.Options{Scope: "q"})
	if err != nil {
		t.Fatal(err)
	}
	h := amqpidem.HandleTx(func(context.Context, *sql.Tx, amqp.Delivery) ([]byte, error) { return nil, nil })
	_, err = amqpidem.NewConsumer(new(amqp.Channel), g, h, amqpidem.Options{Queue: "q", DeadLetterRoutingKey: "q.dlq"})
	if !errors.Is(err, idem.ErrNoTx) || !errors.Is(err, idem.ErrInvalidOptions) {
		t.Fatalf("err = %v, want ErrNoTx and ErrInvalidOptions", err)
	}
}
