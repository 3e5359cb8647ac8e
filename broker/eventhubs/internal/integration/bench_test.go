package integration_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/eventhubs"
	"github.com/idemgo/idem/internal/testenv"
)

// BenchmarkProcessor measures events per second from a hub of four
// partitions on eventhubstest into PostgreSQL, each event's effect one
// row, three ways: a plain Processor loop (the effect in a statement of
// its own, the checkpoint written every batch: at least once), idem's
// two-phase mode (Handle: the record claimed and completed around the
// same statement) and idem's checkpoint mode (HandleCheckpoint: the
// effect, the key's marker and the checkpoint in one transaction). All
// three run on checkpointstore, batches of 100, the four partitions at
// once. Run with -benchtime=Nx: b.N is the event count.
func BenchmarkProcessor(b *testing.B) {
	modes := []struct {
		name string
		run  func(b *testing.B, pg *pgBackend, sb *suiteBroker) func()
	}{
		{"plain", benchPlain},
		{"two-phase", func(b *testing.B, pg *pgBackend, sb *suiteBroker) func() {
			return benchIdem(b, pg, sb, eventhubs.Handle(func(ctx context.Context, ev *azeventhubs.ReceivedEventData) ([]byte, error) {
				_, err := pg.pool.Exec(ctx, `INSERT INTO `+pg.effects+` (id) VALUES ($1)`, eventhubs.MessageOf(ev).ID)
				return nil, err
			}))
		}},
		{"checkpoint", func(b *testing.B, pg *pgBackend, sb *suiteBroker) func() {
			return benchIdem(b, pg, sb, pg.handler(nil))
		}},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			pg := openPG(b)
			sb := newBenchBroker(b, pg)
			cpu0, _ := testenv.ProcessCPU()
			b.ResetTimer()
			stop := m.run(b, pg, sb)
			for pg.count(b, `SELECT count(*) FROM `+pg.effects) < b.N {
				time.Sleep(5 * time.Millisecond) // polling for the end of the run, not synchronising
			}
			b.StopTimer()
			cpu1, ok := testenv.ProcessCPU()
			stop()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			if ok {
				b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/event")
			}
		})
	}
}

// newBenchBroker is a hub of four partitions holding b.N keyed events,
// a quarter on each partition, on pg's checkpoint store.
func newBenchBroker(b *testing.B, pg *pgBackend) *suiteBroker {
	sb := newSuiteBroker(b)
	sb.cps = pg.cps
	ctx := context.Background()
	for k := range suitePartitions {
		var evs []*azeventhubs.EventData
		for i := k; i < b.N; i += suitePartitions {
			id := fmt.Sprintf("bench-%06d", i)
			evs = append(evs, &azeventhubs.EventData{MessageID: &id, Body: []byte(id)})
		}
		part := fmt.Sprint(k)
		if err := eventhubs.Send(ctx, sb.prod, &azeventhubs.EventDataBatchOptions{PartitionID: &part}, evs...); err != nil {
			b.Fatal(err)
		}
	}
	return sb
}

// benchIdem runs h on a Consumer of four partitions at once.
func benchIdem(b *testing.B, pg *pgBackend, sb *suiteBroker, h eventhubs.Handler) func() {
	g, err := eventhubs.NewGuard(pg.store, sb.hub, azeventhubs.DefaultConsumerGroup, idem.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p, cc := newProcessor(b, sb.srv, sb.hub, sb.cps)
	dlq := newProducer(b, sb.srv, sb.dlq)
	c, err := eventhubs.NewConsumer(p, g, h, eventhubs.Options{Concurrency: suitePartitions, DeadLetter: dlq, EventHub: sb.hub, ReceiveWait: 20 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
		cc.Close(context.Background())
	}
}

// benchPlain is the loop the SDK's examples show: each owned partition
// receives a batch, applies each event, checkpoints the batch's last.
func benchPlain(b *testing.B, pg *pgBackend, sb *suiteBroker) func() {
	p, cc := newProcessor(b, sb.srv, sb.hub, sb.cps)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	wg.Go(func() {
		for {
			pc := p.NextPartitionClient(ctx)
			if pc == nil {
				return
			}
			wg.Go(func() {
				defer pc.Close(context.Background())
				for ctx.Err() == nil {
					rctx, rcancel := context.WithTimeout(ctx, 20*time.Millisecond)
					evs, _ := pc.ReceiveEvents(rctx, 100, nil)
					rcancel()
					for _, ev := range evs {
						if _, err := pg.pool.Exec(ctx, `INSERT INTO `+pg.effects+` (id) VALUES ($1)`, eventhubs.MessageOf(ev).ID); err != nil {
							return
						}
					}
					if len(evs) > 0 {
						if err := pc.UpdateCheckpoint(ctx, evs[len(evs)-1], nil); err != nil {
							return
						}
					}
				}
			})
		}
	})
	return func() {
		cancel()
		wg.Wait()
		cc.Close(context.Background())
	}
}
