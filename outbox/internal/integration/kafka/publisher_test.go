package outboxkafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/internal/integration/outboxenv"
	outboxkafka "github.com/idemgo/idem/outbox/kafka"
	"github.com/idemgo/idem/outbox/outboxtest"
)

// TestRelay runs the relay's scenarios through kfake over an in-memory
// outbox (outbox/internal/integration/matrix runs them on every database).
func TestRelay(t *testing.T) {
	outboxtest.RunRelay(t, outboxenv.Memory, outboxenv.KafkaBroker)
}

func rec(id, topic, key, payload string) outbox.Record {
	return outbox.Record{Seq: 1, Message: outbox.Message{ID: id, Destination: topic, OrderingKey: key, Payload: []byte(payload),
		Headers: map[string]string{"traceparent": "00-abc-def-01", "idempotency-key": "not this one"}}}
}

// The consumer side reads the stable id where it looks by default, the
// idempotency-key header (one, the id: a user header of that name does not
// travel), and the ordering key is the Kafka key.
func TestWhereTheConsumerLooks(t *testing.T) {
	k := outboxenv.NewKafka(t)
	p, err := outboxkafka.New(k.Client, outboxkafka.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := rec("order-1-charged", k.Topic, "order-1", `{"amount":42}`)
	if errs := p.Publish(ctx, []outbox.Record{r}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	m, err := k.Receive()(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != r.ID || string(m.Payload) != string(r.Payload) || m.Header("traceparent") != "00-abc-def-01" {
		t.Errorf("kafka.MessageOf: %+v", m)
	}
	kr := p.Record(r)
	n := 0
	for _, h := range kr.Headers {
		if h.Key == "idempotency-key" {
			n++
		}
	}
	if string(kr.Key) != "order-1" || n != 1 {
		t.Errorf("record key %q, %d idempotency-key headers", kr.Key, n)
	}
}

func TestRejections(t *testing.T) {
	k := outboxenv.NewKafka(t)
	p, err := outboxkafka.New(k.Client, outboxkafka.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := p.Publish(ctx, []outbox.Record{
		rec("big", k.Topic, "", string(outboxenv.Incompressible(2*outboxenv.KafkaMaxMessage))),
		rec("fine", k.Topic, "", "ok"),
	})
	if !errors.Is(errs[0], outbox.ErrRejected) {
		t.Errorf("over message.max.bytes: %v, want ErrRejected", errs[0])
	}
	if errs[1] != nil {
		t.Errorf("a good record beside it: %v", errs[1])
	}
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if errs := p.Publish(short, []outbox.Record{rec("nowhere", "no-such-topic", "", "x")}); errs[0] == nil || errors.Is(errs[0], outbox.ErrRejected) {
		t.Errorf("an unknown topic: %v, want a retryable error", errs[0])
	}
}
