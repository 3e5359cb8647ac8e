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
	"github.com/idemgo/idem/store/postgres"
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
	tx := func(ctx context.Context, r *run, store *postgres.Store, fn func(context.Context, pgx.Tx, *kgo.Record) ([]byte, error)) error {
		return e.idem(ctx, r, store, kafka.HandleTx(fn))
	}
	twoPhase := func(ctx context.Context, r *run, fn func(context.Context, *kgo.Record) ([]byte, error)) error {
		return e.idem(ctx, r, d.store, kafka.Handle(fn))
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

// hand is the consumer a user writes with franz-go alone, with idem's
// concurrency model: one goroutine per partition runs work for each of its
// records in order and marks the record, and the client commits the marked
// offsets every second (idem's CommitInterval). The poll loop (500 records,
// idem's MaxPollRecords) never waits for a partition: it queues each
// partition's records, and pauses fetching a partition whose queue holds
// 1000 records (idem's MaxBuffered) until half of them are done. (Handing
// the records over through a bounded channel instead, as simpler loops do,
// processed one partition at a time here: a poll holds one partition's
// records, and the loop waits on its full channel.)
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
	defer wg.Wait()
	parts := make(map[int32]*handQueue)
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
			q := parts[p.Partition]
			if q == nil {
				q = &handQueue{cl: cl, topic: p.Topic, partition: p.Partition, wake: make(chan struct{}, 1)}
				parts[p.Partition] = q
				wg.Go(func() {
					if err := q.work(ctx, r, work); err != nil {
						stop(err)
					}
				})
			}
			q.push(p.Records)
		})
		cl.AllowRebalance()
	}
}

// handQueue is one partition's records waiting for its goroutine.
type handQueue struct {
	cl        *kgo.Client
	topic     string
	partition int32
	wake      chan struct{}

	mu     sync.Mutex
	recs   []*kgo.Record
	paused bool
}

func (q *handQueue) push(recs []*kgo.Record) {
	q.mu.Lock()
	q.recs = append(q.recs, recs...)
	if !q.paused && len(q.recs) >= kafka.DefaultMaxBuffered {
		q.paused = true
		q.cl.PauseFetchPartitions(map[string][]int32{q.topic: {q.partition}})
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *handQueue) pop() *kgo.Record {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.recs) == 0 {
		return nil
	}
	rec := q.recs[0]
	q.recs[0] = nil
	q.recs = q.recs[1:]
	if q.paused && len(q.recs) <= kafka.DefaultMaxBuffered/2 {
		q.paused = false
		q.cl.ResumeFetchPartitions(map[string][]int32{q.topic: {q.partition}})
	}
	return rec
}

// work runs work for each record in turn until ctx ends.
func (q *handQueue) work(ctx context.Context, r *run, work func(context.Context, *kgo.Record) error) error {
	for {
		rec := q.pop()
		if rec == nil {
			select {
			case <-q.wake:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		if err := work(ctx, rec); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		q.cl.MarkCommitRecords(rec)
		r.settled()
	}
}

// idem runs idem's consumer with h over store, with its
// defaults (Concurrency 8, CommitInterval 1s, MaxPollRecords 500; batch
// claims for a Handle handler).
func (e *kafkaEnv) idem(ctx context.Context, r *run, store *postgres.Store, h kafka.Handler) error {
	cl, err := kgo.NewClient(kafka.ClientOptions(e.clientOpts("idem")...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	g, err := kafka.NewGuard(store, cl, idem.Options{})
	if err != nil {
		return err
	}
	return kafka.Consume(ctx, cl, g, h, kafka.Options{Concurrency: workers, Hooks: hooks[*kgo.Record](r), DeadLetterTopic: e.dlq})
}
