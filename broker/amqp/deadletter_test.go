package amqpidem_test

import (
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	amqpidem "github.com/idemgo/idem/broker/amqp"
)

func TestDeadLetterOf(t *testing.T) {
	tests := []struct {
		name       string
		d          amqp.Delivery
		wantID     string
		wantReason string
		wantErr    error
	}{
		{"a consumer's dead letter", amqp.Delivery{MessageId: "order-1", Body: []byte("b"), Headers: amqp.Table{
			amqpidem.HeaderRoutingKey: "orders", idem.HeaderReason: "conflict", "tenant": "t1"}}, "order-1", "conflict", nil},
		{"a delivery of the work queue", amqp.Delivery{MessageId: "order-2", Body: []byte("b")}, "order-2", "", amqpidem.ErrNotDeadLetter},
		{"RabbitMQ's own dead letter", amqp.Delivery{MessageId: "order-3", Body: []byte("b"), Headers: amqp.Table{
			"x-first-death-reason": "delivery_limit"}}, "order-3", "", amqpidem.ErrNotDeadLetter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := amqpidem.DeadLetterOf(tt.d)
			if !errors.Is(err, tt.wantErr) || m.ID != tt.wantID || m.Header(idem.HeaderReason) != tt.wantReason || string(m.Payload) != "b" {
				t.Fatalf("DeadLetterOf = %+v, %v; want ID %q, reason %q, %v", m, err, tt.wantID, tt.wantReason, tt.wantErr)
			}
		})
	}
}
