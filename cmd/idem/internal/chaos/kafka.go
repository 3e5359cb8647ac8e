package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/kafka"
)

// Kafka runs on kfake, franz-go's Kafka written in Go, hosted by the
// supervisor on a loopback port with its data in a private directory. A
// broker restart closes it (it writes its state out) and opens it again on
// the same port and directory: the topics, records and the group's
// committed offsets survive, the connections do not.

// kfakeServer is the harness's Kafka.
type kfakeServer struct {
	mu   sync.Mutex
	c    *kfake.Cluster
	dir  string
	port int
}

// kafkaPartitions is how many partitions the work topic has: the group
// spreads them over the consumers.
const kafkaPartitions = 8

// StartKafka starts the harness's kfake cluster.
func StartKafka(context.Context) (Server, error) {
	dir, err := privateDir("kafka")
	if err != nil {
		return nil, err
	}
	s := &kfakeServer{dir: dir}
	if s.port, err = freePort(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.open(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *kfakeServer) open() error {
	var err error
	for range 50 { // the port may take a moment to be free again
		s.c, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(s.port), kfake.DataDir(s.dir),
			kfake.GroupMinSessionTimeout(100*time.Millisecond))
		if err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("chaos: kfake on port %d: %w", s.port, err)
}

func (s *kfakeServer) URL() string { return "kafka://127.0.0.1:" + strconv.Itoa(s.port) }

func (s *kfakeServer) Restart(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.Close()
	return s.open()
}

func (s *kfakeServer) Stop() {
	s.mu.Lock()
	s.c.Close()
	s.mu.Unlock()
	os.RemoveAll(s.dir)
}

// cluster runs fn with the cluster, never during a restart.
func (s *kfakeServer) cluster(fn func(c *kfake.Cluster)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s.c)
}

func kafkaAddr(url string) string { return strings.TrimPrefix(url, "kafka://") }

type kafkaBus struct {
	srv                       *kfakeServer
	topic, dlq, group, counts string
	maxDeliveries             int // the consumers' MaxDeliveries (0: retry forever)
}

func openKafka(_ context.Context, e *env, maxDeliveries int, naive bool) (bus, error) {
	srv, ok := e.broker.(*kfakeServer)
	if !ok {
		return nil, errors.New("chaos: Kafka runs on the harness's own kfake only")
	}
	b := &kafkaBus{srv: srv, topic: "chaos-orders", dlq: "chaos-dlq", group: "billing", maxDeliveries: maxDeliveries}
	if naive {
		b.topic, b.dlq, b.group = "chaos-naive-orders", "chaos-naive-dlq", "billing-naive"
	}
	var err error
	if b.counts, err = os.MkdirTemp(e.logs, "counts-"); err != nil {
		return nil, err
	}
	srv.cluster(func(c *kfake.Cluster) {
		if err = c.CreateTopic(b.topic, kafkaPartitions, nil); err == nil {
			err = c.CreateTopic(b.dlq, 1, nil)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: kfake: create topics: %w", err)
	}
	return b, nil
}

func (b *kafkaBus) names(cc *childConfig) {
	cc.Source, cc.Durable, cc.DLQ, cc.Counts, cc.MaxDeliveries = b.topic, b.group, b.dlq, b.counts, b.maxDeliveries
}

func (b *kafkaBus) close() {}

// progress: the group's committed offsets against the high watermarks.
func (b *kafkaBus) progress(context.Context) (settled int64, idle, ok bool) {
	var hw int64
	b.srv.cluster(func(c *kfake.Cluster) {
		for _, p := range c.PartitionInfos(b.topic) {
			hw += p.HighWatermark
		}
		if gi := c.GroupInfo(b.group); gi != nil {
			for _, cm := range gi.Commits[b.topic] {
				settled += cm.Offset
			}
		}
	})
	return settled, hw > 0 && settled == hw, true
}

func (b *kafkaBus) deliveries(context.Context) int { return deliveryCounts(b.counts) }

// produce sends batches with ProduceSync and sends again each record whose
// produce failed. The record's Kafka key is the account, which picks its
// partition; the order id is in the idempotency-key header.
func (b *kafkaBus) produce(ctx context.Context, plan *Plan, settled *atomic.Int64) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr(b.srv.URL())), kgo.RecordDeliveryTimeout(5*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	return produceBatches(ctx, plan, settled, 100, func(todo []planned) []planned {
		recs := make([]*kgo.Record, len(todo))
		for j, m := range todo {
			if m.ID == "" {
				recs[j] = &kgo.Record{Topic: b.topic, Key: []byte(m.Order.Account), Value: m.Data}
			} else {
				recs[j] = kafka.Record(b.topic, m.Order.Account, m.ID, m.Data)
			}
		}
		var again []planned
		for j, r := range cl.ProduceSync(ctx, recs...) {
			if r.Err != nil {
				again = append(again, todo[j])
			}
		}
		return again
	})
}

// deadLetters reads the dead-letter topic from its start to its end.
func (b *kafkaBus) deadLetters(ctx context.Context) ([]deadLetter, error) {
	var end int64
	b.srv.cluster(func(c *kfake.Cluster) {
		for _, p := range c.PartitionInfos(b.dlq) {
			end += p.HighWatermark
		}
	})
	if end == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr(b.srv.URL())), kgo.ConsumeTopics(b.dlq),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var dls []deadLetter
	for int64(len(dls)) < end {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("chaos: read the dead letters: %d of %d: %w", len(dls), end, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			m := kafka.MessageOf(r)
			dls = append(dls, newDeadLetter(m.ID, m.Headers[idem.HeaderReason], r.Value))
		})
	}
	return dls, nil
}

// fetchCount counts the records a consumer process's client hands to it.
type fetchCount struct{ c *counter }

func (f fetchCount) OnFetchRecordUnbuffered(_ *kgo.Record, polled bool) {
	if polled {
		f.c.add(1)
	}
}

// runKafka is a Kafka consumer process: a group member whose partitions
// the group assigns, run by the kafka package's consumer.
func runKafka(ctx context.Context, cfg childConfig, l *ledger) error {
	count := newCounter(cfg.Counts)
	opts := []kgo.Opt{
		kgo.SeedBrokers(kafkaAddr(cfg.BrokerURL)), kgo.ConsumerGroup(cfg.Durable), kgo.ConsumeTopics(cfg.Source),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond),
		// A killed member leaves the group when its session ends; a
		// rebalance waits for the members that were there at most
		// RebalanceTimeout (a kill during a rebalance would stall it a
		// minute by default).
		kgo.SessionTimeout(2 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond),
		kgo.RebalanceTimeout(4 * time.Second),
		kgo.WithHooks(fetchCount{count}),
	}
	if cfg.Naive {
		cl, err := kgo.NewClient(append(opts, kgo.AutoCommitMarks(), kgo.AutoCommitInterval(200*time.Millisecond))...)
		if err != nil {
			return err
		}
		defer cl.Close()
		return runNaiveKafka(ctx, cl, l)
	}
	cl, err := kgo.NewClient(kafka.ClientOptions(opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	g, err := kafka.NewGuard(l.store, cl, l.options())
	if err != nil {
		return err
	}
	h := handlerFor(l, func(r *kgo.Record) []byte { return r.Value }, kafka.Handle, kafka.HandleTx[pgx.Tx], kafka.HandleTx[*sql.Tx])
	c, err := kafka.NewConsumer(cl, g, h, kafka.Options{
		DeadLetterTopic: cfg.DLQ, CommitInterval: 200 * time.Millisecond,
		Concurrency: cfg.Concurrency, MaxDeliveries: cfg.MaxDeliveries,
		Backoff: engineBackoff, ShutdownTimeout: engineShutdown, Hooks: engineHooks[*kgo.Record](l),
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// runNaiveKafka: each polled partition's records charged in order (the
// partitions in parallel), each marked for commit once charged; the
// client commits the marks every 200ms. Undecodable records are skipped.
func runNaiveKafka(ctx context.Context, cl *kgo.Client, l *ledger) error {
	for ctx.Err() == nil {
		fs := cl.PollRecords(ctx, 200)
		var wg sync.WaitGroup
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, r := range p.Records {
					for {
						err := l.naive(ctx, r.Value)
						if err == nil {
							l.kill.pass(pointSettle)
						}
						if err == nil || errors.Is(err, errPoison) || ctx.Err() != nil {
							break
						}
						time.Sleep(200 * time.Millisecond)
					}
					cl.MarkCommitRecords(r)
				}
			}()
		})
		wg.Wait()
	}
	return ctx.Err()
}
