package integration_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/broker/brokertest"
	"github.com/idemgo/idem/broker/redisstream"
	"github.com/idemgo/idem/internal/consumetest"
	"github.com/idemgo/idem/internal/testenv"
)

// TestConformance runs broker/brokertest on the Redis at IDEM_REDIS_ADDR:
// each subtest gets a stream and a dead-letter stream under a key prefix
// of its own, and one consumer group that every consumer it starts joins
// under a name of its own.
func TestConformance(t *testing.T) {
	addr := testenv.Redis.Need(t)
	brokertest.Run(t, func(t *testing.T) brokertest.Broker { return newSuiteBroker(t, addr) })
}

// suiteMinIdle is the group's MinIdle: how long a killed consumer's
// entries wait before a survivor claims them.
const suiteMinIdle = time.Second

var prefixes atomic.Int64

type suiteBroker struct {
	addr   string
	rdb    *redis.Client
	stream string
	dlq    string
	down   sync.WaitGroup
	names  atomic.Int64

	mu       sync.Mutex
	dls      []redis.XMessage // every dead letter read, replayed ones included
	replayTo int              // dls[:replayTo] are replayed
}

func newSuiteBroker(t *testing.T, addr string) *suiteBroker {
	prefix := fmt.Sprintf("idemtest:streams:%d:%d:", time.Now().UnixNano(), prefixes.Add(1))
	b := &suiteBroker{addr: addr, rdb: redis.NewClient(&redis.Options{Addr: addr}), stream: prefix + "orders", dlq: prefix + "dlq"}
	t.Cleanup(func() {
		b.down.Wait()
		b.rdb.Del(context.Background(), b.stream, b.dlq)
		b.rdb.Close()
	})
	return b
}

// Features: the group counts deliveries (XPENDING), which the engine
// compares with MaxDeliveries; an entry left pending by a dead consumer is
// claimed after MinIdle. Concurrency handlers run at once: no order kept.
func (b *suiteBroker) Features() brokertest.Features {
	return brokertest.Features{DeliveryLimit: true, Redelivery: suiteMinIdle}
}

func (b *suiteBroker) Publish(ctx context.Context, msgs ...brokertest.Message) error {
	for _, m := range msgs {
		if m.ID == "" { // poison: Publish refuses an entry without an id
			vals := map[string]any{redisstream.FieldPayload: m.Payload}
			for k, v := range m.Headers {
				vals[k] = v
			}
			if err := b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.stream, Values: vals}).Err(); err != nil {
				return err
			}
			continue
		}
		var opts []redisstream.PublishOption
		for k, v := range m.Headers {
			opts = append(opts, redisstream.WithHeader(k, v))
		}
		if _, err := redisstream.Publish(ctx, b.rdb, b.stream, m.ID, m.Payload, opts...); err != nil {
			return err
		}
	}
	return nil
}

// DeadLetters reads the dead-letter stream past the last entry read
// (Replay deletes what it replays from it).
func (b *suiteBroker) DeadLetters(ctx context.Context) ([]brokertest.DeadLetter, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	from := "-"
	if n := len(b.dls); n > 0 {
		from = "(" + b.dls[n-1].ID
	}
	entries, err := b.rdb.XRange(ctx, b.dlq, from, "+").Result()
	if err != nil {
		return nil, err
	}
	b.dls = append(b.dls, entries...)
	out := make([]brokertest.DeadLetter, len(b.dls))
	for i, e := range b.dls {
		im, err := redisstream.DeadLetterOf(e)
		if err != nil {
			return nil, err
		}
		out[i] = brokertest.DeadLetter{ID: im.ID, Payload: im.Payload, Headers: im.Headers}
	}
	return out, nil
}

// Replay replays, with redisstream.Replay, the dead letters DeadLetters
// has read and Replay has not.
func (b *suiteBroker) Replay(ctx context.Context) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for ; b.replayTo < len(b.dls); b.replayTo++ {
		if err := redisstream.Replay(ctx, b.rdb, b.dlq, b.dls[b.replayTo]); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Start runs a consumer of the group on a client of its own, under a name
// of its own; Kill closes the client, leaving its entries pending.
func (b *suiteBroker) Start(ctx context.Context, sc brokertest.Consumer) (brokertest.Running, error) {
	rdb := redis.NewClient(&redis.Options{Addr: b.addr})
	c, err := redisstream.NewConsumer(rdb, sc.Guard, consumetest.SuiteHandler(sc, redisstream.MessageOf), redisstream.Options{
		Concurrency: sc.Concurrency, Backoff: consumetest.Backoff(sc), MaxDeliveries: sc.MaxDeliveries,
		Hooks:  consumetest.Hooks(sc.Hooks, redisstream.MessageOf),
		Stream: b.stream, Group: "suite", Consumer: fmt.Sprintf("c%d", b.names.Add(1)), DeadLetterStream: b.dlq,
		MinIdle: suiteMinIdle, Block: 100 * time.Millisecond,
	})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return consumetest.Start(&b.down, c.Run, rdb.Close, func() { rdb.Close() }), nil
}
