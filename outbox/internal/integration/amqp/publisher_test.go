package outboxamqp_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/outbox"
	outboxamqp "github.com/idemgo/idem/outbox/amqp"
	"github.com/idemgo/idem/outbox/internal/integration/outboxenv"
	"github.com/idemgo/idem/outbox/outboxtest"
)

// TestRelay runs the relay's scenarios through RabbitMQ over an in-memory
// outbox (outbox/internal/integration/matrix runs them on every database).
func TestRelay(t *testing.T) {
	outboxtest.RunRelay(t, outboxenv.Memory, outboxenv.AMQPBroker)
}

func rec(id, exchange, payload string) outbox.Record {
	return outbox.Record{Seq: 1, Message: outbox.Message{ID: id, Destination: exchange, Payload: []byte(payload),
		Headers: map[string]string{"Content-Type": "application/json", "traceparent": "00-abc-def-01"}}}
}

func publish(t *testing.T, p *outboxamqp.Publisher, recs ...outbox.Record) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.Publish(ctx, recs)
}

// The consumer side reads the stable id where it looks by default, the
// MessageId property, with the headers and content type as they were and
// the dedup header of id and content.
func TestWhereTheConsumerLooks(t *testing.T) {
	r := outboxenv.NewRabbitMQ(t)
	p, err := outboxamqp.New(r.Conn, outboxamqp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	in := rec("order-1-charged", r.Exchange, `{"amount":42}`)
	if errs := publish(t, p, in); errs[0] != nil {
		t.Fatal(errs[0])
	}
	m, err := r.Receive(t)(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fp, _ := idem.PayloadFingerprint(idem.Message{Payload: in.Payload})
	if m.ID != in.ID || string(m.Payload) != string(in.Payload) || m.ContentType != "application/json" ||
		m.Header("traceparent") != "00-abc-def-01" || m.Header(amqpidem.HeaderDedup) != idem.DedupID(in.ID, fp) {
		t.Errorf("amqpidem.MessageOf: %+v", m)
	}
}

// A missing exchange fails its own records only; an unroutable message is
// returned and fails; an oversized one is rejected; the good ones beside
// them are confirmed.
func TestFailuresStayWithTheirRecords(t *testing.T) {
	r := outboxenv.NewRabbitMQ(t)
	p, err := outboxamqp.New(r.Conn, outboxamqp.Options{MaxMessageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	unbound := outboxenv.NewRabbitMQ(t)
	if err := unbindAll(unbound); err != nil {
		t.Fatal(err)
	}
	errs := publish(t, p,
		rec("good-1", r.Exchange, "a"),
		rec("no-exchange", "outbox.no.such.exchange", "b"),
		rec("big", r.Exchange, string(make([]byte, 200))),
		rec("unroutable", unbound.Exchange, "c"),
		rec("default-exchange", outboxamqp.DefaultExchange, "d"), // routing key "": no such queue
		rec("good-2", r.Exchange, "e"),
		viaDefault(r.Queue),
	)
	if errs[0] != nil || errs[5] != nil || errs[6] != nil {
		t.Errorf("good records: %v, %v, %v", errs[0], errs[5], errs[6])
	}
	if errs[1] == nil || errors.Is(errs[1], outbox.ErrRejected) {
		t.Errorf("missing exchange: %v, want a retryable error", errs[1])
	}
	if !errors.Is(errs[2], outbox.ErrRejected) {
		t.Errorf("over MaxMessageSize: %v, want ErrRejected", errs[2])
	}
	if errs[3] == nil || errors.Is(errs[3], outbox.ErrRejected) {
		t.Errorf("unroutable: %v, want a retryable error", errs[3])
	}
	if errs[4] == nil {
		t.Errorf("the default exchange with no queue for the key: confirmed and lost")
	}
	receive := r.Receive(t)
	for _, want := range []string{"good-1", "good-2", "via-default"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m, err := receive(ctx)
		cancel()
		if err != nil || m.ID != want {
			t.Fatalf("received %q, %v; want %s", m.ID, err, want)
		}
	}
}

// viaDefault is a record for queue through the default exchange.
func viaDefault(queue string) outbox.Record {
	r := rec("via-default", outboxamqp.DefaultExchange, "f")
	r.RoutingKey = queue
	return r
}

// unbindAll leaves the exchange without a queue.
func unbindAll(r *outboxenv.RabbitMQ) error {
	ch, err := r.Conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	return ch.QueueUnbind(r.Queue, "", r.Exchange, nil)
}
