package integration_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/idemgo/idem"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/internal/consumetest"
	"github.com/idemgo/idem/store/memory"
	amqp "github.com/rabbitmq/amqp091-go"
)

// BenchmarkConsume compares a plain consume loop that acks every delivery
// ("raw") with amqpidem.Consume over the memory store ("idem"), both
// handling one delivery at a time with a prefetch of 2, so the ratio is the
// per-message cost of the guard and its bookkeeping.
func BenchmarkConsume(b *testing.B) {
	for _, mode := range []string{"raw", "idem"} {
		b.Run(mode, func(b *testing.B) {
			e := newEnv(b)
			msgs := make([]amqp.Publishing, b.N)
			for i := range msgs {
				msgs[i] = amqp.Publishing{MessageId: fmt.Sprintf("bench-%d", i), Body: fmt.Appendf(nil, `{"order":%d}`, i)}
			}
			e.publishAll(b, msgs)
			ch := e.channel(b)
			b.ResetTimer()
			if mode == "raw" {
				if err := ch.Qos(2, 0, false); err != nil {
					b.Fatal(err)
				}
				ds, err := ch.Consume(e.queue, "", false, false, false, false, nil)
				if err != nil {
					b.Fatal(err)
				}
				for range b.N {
					d := <-ds
					if err := d.Ack(false); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				g, err := amqpidem.NewGuard(memory.New(), e.queue, idem.Options{})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				err = amqpidem.Consume(ctx, ch, g, amqpidem.Handle(func(context.Context, amqp.Delivery) ([]byte, error) {
					return nil, nil
				}), amqpidem.Options{Queue: e.queue, DeadLetterRoutingKey: e.dlq,
					Hooks: consumetest.CountAcks[amqp.Delivery](b, b.N, cancel)})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
