package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/kafka"
)

type kafkaEnv struct {
	d          *db
	seeds      []string
	topic, dlq string
}

// loadKafka starts an in-process cluster (kfake, one broker) with a topic
// of workers (8) partitions and produces n records to it, round robin.
func loadKafka(t testing.TB, d *db, n int) map[string]side {
	t.Helper()
	topic := fmt.Sprintf("orders-%d", time.Now().UnixNano())
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(workers, topic), kfake.SeedTopics(1, topic+".dlq"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e := &kafkaEnv{d: d, seeds: c.ListenAddrs(), topic: topic, dlq: topic + ".dlq"}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = kafka.Record(topic, "", fmt.Sprintf("order-%d", i), body(i))
		recs[i].Partition = int32(i % workers)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	tx := func(ctx context.Context, r *run, fn func(context.Context, pgx.Tx, *kgo.Record) ([]byte, error)) error {
		return e.idem(ctx, r, kafka.HandleTx(fn))
	}
	twoPhase := func(ctx context.Context, r *run, fn func(context.Context, *kgo.Record) ([]byte, error)) error {
		return e.idem(ctx, r, kafka.Handle(fn))
	}
	return sidesOf(d, kafkaID, func(rec *kgo.Record) []byte { return rec.Value }, e.hand, tx, "idem-2p-batch", twoPhase)
}

// body is message i's payload, the same on every broker.
func body(i int) []byte {
	return fmt.Appendf(nil, `{"order":"order-%d","customer":"c-%d","amount_cents":%d,"currency":"EUR"}`, i, i%97, 100+i%5000)
}

// kafkaID is the message id a record carries (kafka.Record's header).
func kafkaID(rec *kgo.Record) string {
	for _, h := range rec.Headers {
		if h.Key == kafka.DefaultKeyHeader {
			return string(h.Value)
		}
	}
	return ""
}

// clientOpts are the consumer client's settings, the same on both sides.
func (e *kafkaEnv) clientOpts(group string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(e.seeds...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(e.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
}

// hand is the consumer a user writes with franz-go alone, as in its
// goroutine-per-partition example: one goroutine per partition runs work
// for each of its records in order and marks the record, and the client
// commits the marked offsets every second (idem's CommitInterval); polls
// of 500 records (idem's MaxPollRecords).
func (e *kafkaEnv) hand(ctx context.Context, r *run, work func(context.Context, *kgo.Record) error) error {
	cl, err := kgo.NewClient(append(e.clientOpts("hand"),
		kgo.AutoCommitMarks(), kgo.AutoCommitInterval(kafka.DefaultCommitInterval), kgo.BlockRebalanceOnPoll())...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var wg sync.WaitGroup
	parts := make(map[int32]chan []*kgo.Record)
	defer func() {
		for _, ch := range parts {
			close(ch)
		}
		wg.Wait()
	}()
	for {
		fs := cl.PollRecords(ctx, kafka.DefaultMaxPollRecords)
		if ctx.Err() != nil {
			cl.AllowRebalance()
			if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
				return err // a worker's
			}
			return nil
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			ch := parts[p.Partition]
			if ch == nil {
				ch = make(chan []*kgo.Record, 2)
				parts[p.Partition] = ch
				wg.Go(func() {
					for recs := range ch {
						for _, rec := range recs {
							if err := work(ctx, rec); err != nil {
								stop(err)
								return
							}
							cl.MarkCommitRecords(rec)
							r.settled()
						}
					}
				})
			}
			select {
			case ch <- p.Records:
			case <-ctx.Done():
			}
		})
		cl.AllowRebalance()
	}
}

// idem runs idem's consumer with h over the store in e's database, with its
// defaults (Concurrency 8, CommitInterval 1s, MaxPollRecords 500; batch
// claims for a Handle handler).
func (e *kafkaEnv) idem(ctx context.Context, r *run, h kafka.Handler) error {
	cl, err := kgo.NewClient(kafka.ClientOptions(e.clientOpts("idem")...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	g, err := kafka.NewGuard(e.d.store, cl, idem.Options{})
	if err != nil {
		return err
	}
	return kafka.Consume(ctx, cl, g, h, kafka.Options{DeadLetterTopic: e.dlq, Concurrency: workers, Hooks: hooks[*kgo.Record](r)})
}
