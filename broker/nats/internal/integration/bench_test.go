package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/idem"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/internal/consumetest"
	"github.com/idemgo/idem/store/memory"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkConsume compares a plain JetStream pull loop that acks every
// message ("raw") with natsidem.Consume over the memory store ("idem"),
// both handling one message at a time with the same prefetch, so the ratio
// is the per-message cost of the guard and its bookkeeping.
func BenchmarkConsume(b *testing.B) {
	for _, mode := range []string{"raw", "idem"} {
		b.Run(mode, func(b *testing.B) {
			e := newEnv(b)
			msgs := make([]*nats.Msg, b.N)
			for i := range msgs {
				m := nats.NewMsg(e.subject + ".bench")
				m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("bench-%d", i))
				m.Data = fmt.Appendf(nil, `{"order":%d}`, i)
				msgs[i] = m
			}
			e.publishAll(b, msgs)
			cons := e.consumer(b, "bench", 30*time.Second)
			b.ResetTimer()
			if mode == "raw" {
				it, err := cons.Messages(jetstream.PullMaxMessages(4), jetstream.PullExpiry(5*time.Second))
				if err != nil {
					b.Fatal(err)
				}
				for range b.N {
					m, err := it.Next()
					if err != nil {
						b.Fatal(err)
					}
					if err := m.Ack(); err != nil {
						b.Fatal(err)
					}
				}
				it.Stop()
			} else {
				g, err := natsidem.NewGuard(memory.New(), cons, idem.Options{})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				err = natsidem.Consume(ctx, cons, g, natsidem.Handle(func(context.Context, jetstream.Msg) ([]byte, error) {
					return nil, nil
				}), natsidem.Options{Hooks: consumetest.CountAcks[jetstream.Msg](b, b.N, cancel), JetStream: e.js, DeadLetterSubject: e.dlq, Prefetch: 4})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
