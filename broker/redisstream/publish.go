package redisstream

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
)

// PublishOption configures Publish.
type PublishOption func(*publishConfig)

type publishConfig struct {
	fields map[string]any
}

// WithHeader sets a field of the entry, which MessageOf shows the guard
// as a header (idem.HeaderKey reads it). Idem-Id and payload are
// Publish's: a field of either name is replaced.
func WithHeader(name, value string) PublishOption {
	return func(c *publishConfig) { c.fields[name] = value }
}

// Publish adds an entry to stream (XADD) with the stable message id id in
// its Idem-Id field (FieldID), which MessageOf reads as the key, and
// payload in its payload field (FieldPayload), and returns the entry's id
// once Redis has it. Reuse the same id when retrying a publish: a retry
// is another entry (Redis assigns each its own entry id), and the
// consumer's guard recognises it as the same message.
//
// Publish sets no broker dedup id, because Redis Streams has none: XADD
// never compares entries, so no duplicate window can swallow an id reused
// with other content; it reaches the consumer, whose guard dead-letters it
// as a conflict. An empty id is an error wrapping idem.ErrNoKey.
func Publish(ctx context.Context, rdb redis.UniversalClient, stream, id string, payload []byte, opts ...PublishOption) (string, error) {
	if strings.TrimSpace(id) == "" {
		return "", fmt.Errorf("redisstream: publish to %s: %w", stream, idem.ErrNoKey)
	}
	cfg := publishConfig{fields: make(map[string]any, len(opts)+2)}
	for _, o := range opts {
		o(&cfg)
	}
	cfg.fields[FieldID], cfg.fields[FieldPayload] = id, payload
	entry, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: cfg.fields}).Result()
	if err != nil {
		return "", fmt.Errorf("redisstream: publish to %s: %w", stream, err)
	}
	return entry, nil
}
