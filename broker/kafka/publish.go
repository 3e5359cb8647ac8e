package kafka

import (
	"context"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
)

// Publish produces Record(topic, key, id, value, opts...) on cl and waits
// for the broker's acknowledgement: the message's stable id id travels in
// the idempotency-key header (DefaultKeyHeader), which MessageOf reads,
// and key is the Kafka partitioning key ("" for none). Reuse the same id
// when retrying a publish: the consumer's guard recognises the repeat.
//
// Publish sets no broker dedup id, because Kafka has none: the idempotent
// producer (the kgo default) drops a retried batch within one producer
// session by its sequence numbers, not by an id of the message, so there
// is no duplicate window that could swallow an id reused with other
// content; that content reaches the consumer, whose guard dead-letters it
// as a conflict. An empty id is an error wrapping idem.ErrNoKey.
func Publish(ctx context.Context, cl *kgo.Client, topic, key, id string, value []byte, opts ...RecordOption) error {
	if strings.TrimSpace(id) == "" {
		return fmt.Errorf("kafka: publish to %s: %w", topic, idem.ErrNoKey)
	}
	if err := cl.ProduceSync(ctx, Record(topic, key, id, value, opts...)).FirstErr(); err != nil {
		return fmt.Errorf("kafka: publish to %s: %w", topic, err)
	}
	return nil
}
