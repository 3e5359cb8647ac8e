package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/broker/kafka"
)

// TestPublish: kafka.Publish writes the record with the id in the
// idempotency-key header (the consumer's key, through MessageOf) and the
// partitioning key as the Kafka key, and returns once it is acknowledged.
func TestPublish(t *testing.T) {
	e := newEnv(t, "publish", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := kafka.Publish(ctx, e.cl, e.topic, "cust-1", "order-1", []byte(`{"n":1}`), kafka.WithHeader("trace", "t1")); err != nil {
		t.Fatal(err)
	}
	if end := e.endOffsets()[0]; end != 1 {
		t.Fatalf("end offset %d after Publish returned, want 1", end)
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(e.c.ListenAddrs()...), kgo.ConsumeTopics(e.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var got *kgo.Record
	for got == nil {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) { got = r })
	}
	m := kafka.MessageOf(got)
	if m.ID != "order-1" || string(got.Key) != "cust-1" || string(got.Value) != `{"n":1}` || m.Header("trace") != "t1" {
		t.Fatalf("published %+v, read as %+v", got, m)
	}
}
