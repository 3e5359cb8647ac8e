package mqttidem_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"github.com/idemgo/idem"
	mqttidem "github.com/idemgo/idem/broker/mqtt"
	"github.com/idemgo/idem/store/memory"
)

// An ingest service stores each sensor reading once, however often the
// broker delivers it (a redelivery after a reconnect, a device that
// published twice with the same idem-id). Conflicts and readings rejected
// for good go to dlq/sensors with the reason in Idem-Reason. Use a durable
// store in production: the in-memory one forgets at restart.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	opts := mqttidem.Options{
		Concurrency: 8, MaxDeliveries: 10,
		Server:          "mqtt://127.0.0.1:1883",
		ClientID:        "ingest-1",
		Topic:           "$share/ingest/sensors/+/readings",
		DeadLetterTopic: "dlq/sensors",
	}
	// The scope: the shared subscription, which every process of the group shares.
	g, err := mqttidem.NewGuard(memory.New(), opts.Topic, opts.ClientID, idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	h := mqttidem.Handle(func(ctx context.Context, m *mqttidem.Message) ([]byte, error) {
		return store(ctx, m.Topic, m.Payload)
	})
	if err := mqttidem.Consume(ctx, g, h, opts); err != nil { // or NewConsumer + Run
		log.Fatal(err) // a misconfiguration, found before connecting, or the connection's error
	}
}

func store(context.Context, string, []byte) ([]byte, error) { return []byte("ok"), nil }
