package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/broker/redisstream"
	"github.com/idemgo/idem/internal/testenv"
)

// TestPublish: Publish adds one entry with the id in Idem-Id, the payload
// and the headers as fields, read back by MessageOf as the producer sent
// it; a retry of the same id is another entry (Redis has no dedup), which
// the consumer's record makes a duplicate.
func TestPublish(t *testing.T) {
	addr := testenv.Redis.Need(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	stream := fmt.Sprintf("idemtest:publish:%d", time.Now().UnixNano())
	defer rdb.Del(ctx, stream)
	var ids []string
	for range 2 {
		id, err := redisstream.Publish(ctx, rdb, stream, "order-1", []byte(`{"n":1}`),
			redisstream.WithHeader("Content-Type", "application/json"), redisstream.WithHeader(redisstream.FieldID, "not-the-id"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	entries, err := rdb.XRange(ctx, stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[0].ID != ids[0] || entries[1].ID != ids[1] {
		t.Fatalf("entries %v, want the two Publish returned (%v)", entries, ids)
	}
	for _, e := range entries {
		m := redisstream.MessageOf(&redisstream.Message{Stream: stream, XMessage: e})
		if m.ID != "order-1" || string(m.Payload) != `{"n":1}` || m.ContentType != "application/json" || len(m.Headers) != 1 {
			t.Fatalf("entry %s read as %+v", e.ID, m)
		}
	}
}
