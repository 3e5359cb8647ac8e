package kafka_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/store/memory"
)

func TestNewConsumerValidates(t *testing.T) {
	e := newEnv(t, "valid", 1)
	g, _ := newGuard(t, nil)
	seed := kgo.SeedBrokers(e.c.ListenAddrs()...)
	build := func(opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{seed}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	tests := []struct {
		name string
		cl   *kgo.Client
		opts kafka.Options
		want error
	}{
		{"no group", build(kgo.ConsumeTopics(e.topic)), kafka.Options{DeadLetterTopic: e.dlq}, kafka.ErrClientConfig},
		{"autocommit", build(kgo.ConsumerGroup("g1"), kgo.ConsumeTopics(e.topic)), kafka.Options{DeadLetterTopic: e.dlq}, kafka.ErrClientConfig},
		{"no hooks", build(kgo.ConsumerGroup("g2"), kgo.ConsumeTopics(e.topic), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll()), kafka.Options{DeadLetterTopic: e.dlq}, kafka.ErrClientConfig},
		{"no dead-letter topic", build(kafka.ClientOptions(kgo.ConsumerGroup("g3"), kgo.ConsumeTopics(e.topic))...), kafka.Options{}, idem.ErrInvalidOptions},
		{"retry bounds", build(kafka.ClientOptions(kgo.ConsumerGroup("g4"), kgo.ConsumeTopics(e.topic))...), kafka.Options{DeadLetterTopic: e.dlq, RetryMin: 2, RetryMax: 1}, idem.ErrInvalidOptions},
		{"invalid scope", build(kafka.ClientOptions(kgo.ConsumerGroup("g5"), kgo.ConsumeTopics(e.topic))...), kafka.Options{DeadLetterTopic: e.dlq, Scope: "bad\x00scope"}, idem.ErrInvalidOptions},
		{"negative claim batch", build(kafka.ClientOptions(kgo.ConsumerGroup("g6"), kgo.ConsumeTopics(e.topic))...), kafka.Options{DeadLetterTopic: e.dlq, MaxClaimBatch: -1}, idem.ErrInvalidOptions},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := kafka.NewConsumer(tc.cl, g, tc.opts); !errors.Is(err, tc.want) {
				t.Fatalf("NewConsumer = %v, want %v", err, tc.want)
			}
		})
	}

	cl := e.consumerClient()
	defer cl.Close()
	c, err := kafka.NewConsumer(cl, g, kafka.Options{DeadLetterTopic: e.dlq})
	if err != nil {
		t.Fatal(err)
	}
	if c.Scope() != e.group {
		t.Errorf("scope %q, want the group %q", c.Scope(), e.group)
	}
	if _, err := kafka.NewConsumer(cl, g, kafka.Options{DeadLetterTopic: e.dlq}); !errors.Is(err, kafka.ErrClientConfig) {
		t.Errorf("second consumer on one client: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Run(ctx, func(context.Context, *kgo.Record) ([]byte, error) { return nil, nil }); err != nil {
		t.Errorf("Run with an ended context: %v", err)
	}
	if err := c.Run(ctx, func(context.Context, *kgo.Record) ([]byte, error) { return nil, nil }); !errors.Is(err, kafka.ErrRunning) {
		t.Errorf("second Run: %v", err)
	}
}

// TestConsumerGuard: the consumer keys records with its own scope and key
// function, not the given guard's, and leaves the given guard unchanged.
func TestConsumerGuard(t *testing.T) {
	e := newEnv(t, "guard", 1)
	g, err := idem.New(memory.New(), idem.Options{Scope: "guard-scope", Key: func(idem.Message) (string, error) {
		return "from-the-guard", nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	rec := kafka.Record(e.topic, "", "order-42", []byte("v"), kafka.WithHeader("other", "o-1"))

	cl := e.consumerClient()
	defer cl.Close()
	c, err := kafka.NewConsumer(cl, g, kafka.Options{DeadLetterTopic: e.dlq})
	if err != nil {
		t.Fatal(err)
	}
	if k, err := c.Key(rec); err != nil || k != (idem.Key{Scope: e.group, ID: "order-42"}) {
		t.Errorf("default Key = %+v, %v; want the group and the idempotency-key header", k, err)
	}

	cl2 := e.consumerClient()
	defer cl2.Close()
	c2, err := kafka.NewConsumer(cl2, g, kafka.Options{DeadLetterTopic: e.dlq, Scope: "mine", Key: idem.HeaderKey("other")})
	if err != nil {
		t.Fatal(err)
	}
	if k, err := c2.Key(rec); err != nil || k != (idem.Key{Scope: "mine", ID: "o-1"}) || c2.Scope() != "mine" {
		t.Errorf("Key = %+v, %v, scope %q; want Options.Scope and Options.Key", k, err, c2.Scope())
	}
	if k, err := g.Key(kafka.MessageOf(rec)); err != nil || k != (idem.Key{Scope: "guard-scope", ID: "from-the-guard"}) {
		t.Errorf("the given guard changed: %+v, %v", k, err)
	}
	if _, err := c.Key(&kgo.Record{Topic: e.topic}); !errors.Is(err, idem.ErrNoKey) {
		t.Errorf("Key of a record without the header = %v, want ErrNoKey", err)
	}
}

func TestRecordAndKeys(t *testing.T) {
	r := kafka.Record("orders", "cust-7", "order-42", []byte(`{"amount":5}`),
		kafka.WithCloudEvent("/billing", "order.created"), kafka.WithHeader("content-type", "application/json"))
	if string(r.Key) != "cust-7" || r.Topic != "orders" {
		t.Fatalf("record %+v", r)
	}
	m := kafka.MessageOf(r)
	if m.ID != "" {
		t.Errorf("MessageOf(r).ID = %q: offsets and transport values are never ids", m.ID)
	}
	if m.ContentType != "application/json" {
		t.Errorf("content type %q", m.ContentType)
	}
	if id, err := idem.HeaderKey(kafka.DefaultKeyHeader)(m); err != nil || id != "order-42" {
		t.Errorf("header key %q %v", id, err)
	}
	if id, err := idem.CloudEventsKey(m); err != nil || id != "/billing|order-42" {
		t.Errorf("CloudEvents key %q %v", id, err)
	}
	if kafka.Record("t", "", "x", nil).Key != nil {
		t.Error("empty partitioning key must stay nil")
	}
	// A repeated header: the first value is the key.
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: kafka.DefaultKeyHeader, Value: []byte("other")})
	if got := kafka.MessageOf(r).Header(kafka.DefaultKeyHeader); got != "order-42" {
		t.Errorf("repeated header gave %q", got)
	}
}

func TestDeadLetterRecord(t *testing.T) {
	orig := &kgo.Record{Topic: "orders", Partition: 3, Offset: 77, Key: []byte("k"), Value: []byte("v"),
		Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: kafka.HeaderReason, Value: []byte("old")}, {Key: "a", Value: []byte("2")}}}
	res := idem.Result{Outcome: idem.OutcomeFailed, Key: idem.Key{Scope: "s", ID: "id-1"}}
	dl := kafka.DeadLetter("orders.dlq", orig, kafka.ReasonRetriesExhausted, res, errors.New(strings.Repeat("é", 5000)))
	if dl.Topic != "orders.dlq" || string(dl.Key) != "k" || string(dl.Value) != "v" {
		t.Fatalf("dead letter %+v", dl)
	}
	got := make(map[string][]string)
	for _, h := range dl.Headers {
		got[h.Key] = append(got[h.Key], string(h.Value))
	}
	want := map[string][]string{"a": {"1", "2"}, kafka.HeaderReason: {kafka.ReasonRetriesExhausted, "old"},
		idem.HeaderDeadLetterKey: {"s/id-1"}, kafka.HeaderOriginalTopic: {"orders"},
		kafka.HeaderOriginalPartition: {"3"}, kafka.HeaderOriginalOffset: {"77"}}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Errorf("header %s = %v, want %v", k, got[k], v)
		}
	}
	if _, ok := got[kafka.HeaderOriginalTimestamp]; ok {
		t.Error("a timestamp header for a record without a timestamp")
	}
	if e := got[kafka.HeaderError][0]; len(e) == 0 || len(e) > 1024 || !utf8.ValidString(e) {
		t.Errorf("error header of %d bytes, valid UTF-8 %v", len(e), utf8.ValidString(e))
	}
	if tail := dl.Headers[len(dl.Headers)-3:]; !slices.EqualFunc(tail, orig.Headers, func(a, b kgo.RecordHeader) bool {
		return a.Key == b.Key && string(a.Value) == string(b.Value)
	}) {
		t.Errorf("original headers %v, want %v as they were", tail, orig.Headers)
	}
	if dl.Headers[0].Key != idem.HeaderReason {
		t.Errorf("first header %s, want the reason", dl.Headers[0].Key)
	}
}
