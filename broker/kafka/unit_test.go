package kafka_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/store/memory"
)

// unreachable is a seed broker nothing listens on: NewConsumer checks its
// client, guard, handler and options without reaching the cluster. (The
// tests on a cluster, kfake's, are in internal/integration.)
const unreachable = "127.0.0.1:1"

// TestNewConsumerValidates: NewConsumer refuses a misconfigured client, bad
// options, a missing guard or handler and a second consumer on one client;
// Run returns at once with an ended context, and refuses a second run.
func TestNewConsumerValidates(t *testing.T) {
	const topic, dlqTopic, group = "valid", "valid.dlq", "valid-group"
	g, err := idem.New(memory.New(), idem.Options{Scope: group})
	if err != nil {
		t.Fatal(err)
	}
	seed := kgo.SeedBrokers(unreachable)
	build := func(opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{seed}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	good := func(group string) *kgo.Client {
		return build(kafka.ClientOptions(kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic))...)
	}
	noop := kafka.Handle(func(context.Context, *kgo.Record) ([]byte, error) { return nil, nil })
	dlq := kafka.Options{DeadLetterTopic: dlqTopic}
	tests := []struct {
		name string
		cl   *kgo.Client
		g    *idem.Guard
		h    kafka.Handler
		opts kafka.Options
		want error
	}{
		{"no group", build(kgo.ConsumeTopics(topic)), g, noop, dlq, kafka.ErrClientConfig},
		{"autocommit", build(kgo.ConsumerGroup("g1"), kgo.ConsumeTopics(topic)), g, noop, dlq, kafka.ErrClientConfig},
		{"no hooks", build(kgo.ConsumerGroup("g2"), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll()), g, noop, dlq, kafka.ErrClientConfig},
		{"no dead-letter topic", good("g3"), g, noop, kafka.Options{}, idem.ErrInvalidOptions},
		{"negative max deliveries", good("g4"), g, noop, kafka.Options{MaxDeliveries: -1, DeadLetterTopic: dlqTopic}, idem.ErrInvalidOptions},
		{"negative claim batch", good("g6"), g, noop, kafka.Options{DeadLetterTopic: dlqTopic, MaxClaimBatch: -1}, idem.ErrInvalidOptions},
		{"nil guard", good("g7"), nil, noop, dlq, idem.ErrInvalidOptions},
		{"no handler", good("g8"), g, kafka.Handle(nil), dlq, broker.ErrNoHandler},
		{"zero handler", good("g9"), g, kafka.Handler{}, dlq, idem.ErrInvalidOptions},
		{"HandleTx without transactions", good("g10"), g, kafka.HandleTx(func(context.Context, *sql.Tx, *kgo.Record) ([]byte, error) { return nil, nil }), dlq, idem.ErrNoTx},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := kafka.NewConsumer(tc.cl, tc.g, tc.h, tc.opts); !errors.Is(err, tc.want) {
				t.Fatalf("NewConsumer = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := kafka.NewConsumer(nil, g, noop, dlq); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Errorf("nil client: %v", err)
	}

	cl := good(group)
	c, err := kafka.NewConsumer(cl, g, noop, dlq)
	if err != nil {
		t.Fatal(err)
	}
	if c.Scope() != group {
		t.Errorf("scope %q, want the guard's %q", c.Scope(), group)
	}
	if _, err := kafka.NewConsumer(cl, g, noop, dlq); !errors.Is(err, kafka.ErrClientConfig) {
		t.Errorf("second consumer on one client: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Run(ctx); err != nil {
		t.Errorf("Run with an ended context: %v", err)
	}
	if err := c.Run(ctx); !errors.Is(err, kafka.ErrRunning) {
		t.Errorf("second Run: %v", err)
	}
	if err := kafka.Consume(ctx, good("g11"), g, kafka.Handle(nil), dlq); !errors.Is(err, broker.ErrNoHandler) {
		t.Errorf("Consume without a handler: %v", err)
	}
}

// TestConsumerGuard: the guard is the one place for scope and key. The
// consumer keys records with the guard's scope and key function as they
// are: NewGuard's scope is the group, and the default key reads the
// idempotency-key header through MessageOf; a key function set on the
// guard is used instead.
func TestConsumerGuard(t *testing.T) {
	const topic, group = "guard", "guard-group"
	client := func() *kgo.Client {
		cl, err := kgo.NewClient(kafka.ClientOptions(kgo.SeedBrokers(unreachable), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic))...)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	rec := kafka.Record(topic, "", "order-42", []byte("v"), kafka.WithHeader("other", "o-1"))

	cl := client()
	defer cl.Close()
	g, err := kafka.NewGuard(memory.New(), cl, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	noop := kafka.Handle(func(context.Context, *kgo.Record) ([]byte, error) { return nil, nil })
	c, err := kafka.NewConsumer(cl, g, noop, kafka.Options{DeadLetterTopic: topic + ".dlq"})
	if err != nil {
		t.Fatal(err)
	}
	if k, err := c.Key(rec); err != nil || k != (idem.Key{Scope: group, ID: "order-42"}) {
		t.Errorf("default Key = %+v, %v; want the group and the idempotency-key header", k, err)
	}
	if _, err := c.Key(&kgo.Record{Topic: topic}); !errors.Is(err, idem.ErrNoKey) {
		t.Errorf("Key of a record without the header = %v, want ErrNoKey", err)
	}

	cl2 := client()
	defer cl2.Close()
	g2, err := kafka.NewGuard(memory.New(), cl2, idem.Options{Scope: "mine", Key: idem.HeaderKey("other")})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := kafka.NewConsumer(cl2, g2, noop, kafka.Options{DeadLetterTopic: topic + ".dlq"})
	if err != nil {
		t.Fatal(err)
	}
	if k, err := c2.Key(rec); err != nil || k != (idem.Key{Scope: "mine", ID: "o-1"}) || c2.Scope() != "mine" {
		t.Errorf("Key = %+v, %v, scope %q; want the guard's scope and key", k, err, c2.Scope())
	}
}

func TestRecordAndKeys(t *testing.T) {
	r := kafka.Record("orders", "cust-7", "order-42", []byte(`{"amount":5}`),
		kafka.WithCloudEvent("/billing", "order.created"), kafka.WithHeader("content-type", "application/json"))
	if string(r.Key) != "cust-7" || r.Topic != "orders" {
		t.Fatalf("record %+v", r)
	}
	m := kafka.MessageOf(r)
	if m.ID != "order-42" {
		t.Errorf("MessageOf(r).ID = %q, want the idempotency-key header", m.ID)
	}
	if id, err := idem.MessageID(m); err != nil || id != "order-42" {
		t.Errorf("the guard's default key %q %v", id, err)
	}
	if m.CorrelationID != "" {
		t.Errorf("correlation id %q: Kafka has none of its own", m.CorrelationID)
	}
	if got := kafka.MessageOf(&kgo.Record{Value: []byte("v"), Offset: 7}); got.ID != "" {
		t.Errorf("a record without the header has ID %q: offsets are never ids", got.ID)
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
	if got := kafka.MessageOf(r); got.Header(kafka.DefaultKeyHeader) != "order-42" || got.ID != "order-42" {
		t.Errorf("repeated header gave %q, ID %q", got.Header(kafka.DefaultKeyHeader), got.ID)
	}
}

func TestDeadLetterRecord(t *testing.T) {
	orig := &kgo.Record{Topic: "orders", Partition: 3, Offset: 77, Key: []byte("k"), Value: []byte("v"),
		Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: kafka.HeaderReason, Value: []byte("old")}, {Key: "a", Value: []byte("2")}}}
	res := idem.Result{Outcome: idem.OutcomeFailed, Key: idem.Key{Scope: "s", ID: "id-1"}}
	dl := kafka.DeadLetter("orders.dlq", orig, broker.DeadLetterHeaders(context.Background(), nil, kafka.MessageOf(orig), res, errors.New(strings.Repeat("é", 5000)), broker.ReasonMaxDeliver))
	if dl.Topic != "orders.dlq" || string(dl.Key) != "k" || string(dl.Value) != "v" {
		t.Fatalf("dead letter %+v", dl)
	}
	got := make(map[string][]string)
	for _, h := range dl.Headers {
		got[h.Key] = append(got[h.Key], string(h.Value))
	}
	want := map[string][]string{"a": {"1", "2"}, kafka.HeaderReason: {broker.ReasonMaxDeliver, "old"},
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
	if e := got[kafka.HeaderError][0]; len(e) == 0 || len(e) > broker.MaxHeaderText+len("…") || !utf8.ValidString(e) {
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
