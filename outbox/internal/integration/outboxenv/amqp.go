package outboxenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/outbox"
	outboxamqp "github.com/idemgo/idem/outbox/amqp"
	"github.com/idemgo/idem/outbox/outboxtest"
)

// AMQPMaxMessage is the max_message_size the test publishers are given.
const AMQPMaxMessage = 4096

// RabbitMQ is one test's fanout exchange and the queue bound to it, on the
// server testenv names.
type RabbitMQ struct {
	Conn     *amqp.Connection
	Exchange string
	Queue    string
}

// NewRabbitMQ declares them, deleted at the end.
func NewRabbitMQ(t testing.TB) *RabbitMQ {
	t.Helper()
	conn, err := amqp.Dial(testenv.RabbitMQ.Need(t))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("%d.%d", time.Now().UnixNano(), rand.Uint32())
	r := &RabbitMQ{Conn: conn, Exchange: "outbox.ex." + tag, Queue: "outbox.q." + tag}
	if err := ch.ExchangeDeclare(r.Exchange, "fanout", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(r.Queue, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(r.Queue, "", r.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(r.Queue, false, false, false)
		_ = ch.ExchangeDelete(r.Exchange, false, false)
		ch.Close()
	})
	return r
}

// Receive returns a function reading the queue in order, each delivery as
// amqpidem.MessageOf builds it.
func (r *RabbitMQ) Receive(t testing.TB) func(ctx context.Context) (idem.Message, error) {
	t.Helper()
	ch, err := r.Conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	ds, err := ch.Consume(r.Queue, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context) (idem.Message, error) {
		select {
		case d, ok := <-ds:
			if !ok {
				return idem.Message{}, fmt.Errorf("the queue's consumer stopped")
			}
			return amqpidem.MessageOf(d), nil
		case <-ctx.Done():
			return idem.Message{}, ctx.Err()
		}
	}
}

// AMQPBroker is outboxtest's broker on RabbitMQ.
func AMQPBroker(t *testing.T) outboxtest.Broker {
	r := NewRabbitMQ(t)
	pub, err := outboxamqp.New(r.Conn, outboxamqp.Options{MaxMessageSize: AMQPMaxMessage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return outboxtest.Broker{
		Publisher:   pub,
		Destination: r.Exchange,
		Receive:     r.Receive(t),
		Rejected:    &outbox.Message{ID: "too-large", Destination: r.Exchange, Payload: make([]byte, 2*AMQPMaxMessage)},
	}
}
