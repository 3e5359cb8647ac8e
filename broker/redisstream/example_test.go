package redisstream_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/redisstream"
	"github.com/idemgo/idem/store/memory"
)

// A billing service reads the orders stream in the billing group and
// charges each order once, however often the group delivers it (a
// consumer that died, a producer that added an order twice). Conflicts and
// orders rejected for good go to orders.dlq with the reason in Idem-Reason.
// Use a durable store in production, such as store/redis on the same
// Redis: the in-memory one forgets at restart.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()

	g, err := redisstream.NewGuard(memory.New(), "orders", "billing", idem.Options{}) // scope: "orders/billing"
	if err != nil {
		log.Fatal(err)
	}
	host, _ := os.Hostname()
	h := redisstream.Handle(func(ctx context.Context, m *redisstream.Message) ([]byte, error) {
		return charge(ctx, idem.DeriveKey(ctx, "charge"), redisstream.MessageOf(m).Payload)
	})
	err = redisstream.Consume(ctx, rdb, g, h, redisstream.Options{ // or NewConsumer + Run
		Concurrency: 8, MaxDeliveries: 10,
		Stream:           "orders",
		Group:            "billing",
		Consumer:         host,
		DeadLetterStream: "orders.dlq",
	})
	if err != nil {
		log.Fatal(err) // a misconfiguration, found before any entry is read, or Redis's error
	}
}

// The producer adds each order with Publish: the order id in the Idem-Id
// field (the consumers' key), the order in the payload field. A retry
// with the same id is another entry, acked by the consumer as a duplicate.
func ExamplePublish() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	_, err := redisstream.Publish(ctx, rdb, "orders", "order-1042", []byte(`{"order":1042,"amount":30}`),
		redisstream.WithHeader("Content-Type", "application/json"))
	if err != nil {
		log.Fatal(err)
	}
}

func charge(context.Context, string, []byte) ([]byte, error) { return []byte("ok"), nil }
