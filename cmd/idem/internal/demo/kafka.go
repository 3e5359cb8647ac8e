package demo

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/kafka"
)

// Kafka is an in-process Kafka (kfake, franz-go's Kafka written in Go)
// through the real kgo client: a topic of orders whose partitions a
// consumer group per side spreads over its consumers, keyed by order id,
// and a dead-letter topic. idem's consumers are kafka.NewConsumer and the
// producer kafka.Publish; the naive consumers are plain kgo group members
// committing the offsets of what they charged. A crash cuts the consumer's
// connections, so nothing it did since (its offset commits included)
// reaches the broker: its partitions go to the group's other members when
// its session (AckWait) runs out, from the last committed offset. On idem's
// side the crashes and lost commits come after a charge (a crash sends
// back every record done since the last commit: drawn on those duplicates
// too, crashes would breed crashes).
var Kafka = &Broker{name: "kafka", inProcess: true, start: func(ctx context.Context, cfg Config, runID string) (transport, error) {
	return startKafka(ctx, cfg)
}}

type kafkaBroker struct {
	cfg        Config
	cluster    *kfake.Cluster
	producer   *kgo.Client
	topic, dlq string
	session    time.Duration // the group members' session timeout
}

func startKafka(_ context.Context, cfg Config) (_ *kafkaBroker, err error) {
	b := &kafkaBroker{cfg: cfg, topic: "orders", dlq: "orders-dlq", session: max(cfg.AckWait, 500*time.Millisecond)}
	// Two partitions a consumer: a crash stalls only the crashed
	// consumer's partitions, until the group moves them.
	parts := int32(2 * cfg.Consumers)
	if b.cluster, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, b.topic), kfake.SeedTopics(1, b.dlq),
		kfake.GroupMinSessionTimeout(100*time.Millisecond)); err != nil {
		return nil, fmt.Errorf("%w: in-process Kafka: %v", ErrBroker, err)
	}
	if b.producer, err = kgo.NewClient(kgo.SeedBrokers(b.cluster.ListenAddrs()...)); err != nil {
		b.close()
		return nil, fmt.Errorf("%w: in-process Kafka: %v", ErrBroker, err)
	}
	return b, nil
}

func (b *kafkaBroker) name() string { return "in-process Kafka (kfake)" }

// lostAckCrashes: the adapter marks a record done itself and commits its
// offset later, so a lost commit is injected as a crash (the consumer's
// connections cut before the commit), on the naive side too.
func (b *kafkaBroker) lostAckCrashes() bool { return true }

func (b *kafkaBroker) close() {
	if b.producer != nil {
		b.producer.Close()
	}
	if b.cluster != nil {
		b.cluster.Close()
	}
}

// publish produces the order with kafka.Publish, keyed by its id: an
// order's retries and reuses follow it in its partition. Kafka drops no
// producer retry: every one reaches the consumers.
func (b *kafkaBroker) publish(ctx context.Context, m message, seq uint64) error {
	err := kafka.Publish(ctx, b.producer, b.topic, m.Order.ID, m.Order.ID, m.payload(),
		kafka.WithHeader(orderHeader, m.Order.ID), kafka.WithHeader(seqHeader, strconv.FormatUint(seq, 10)),
		kafka.WithHeader("content-type", "application/json"))
	if err != nil {
		return fmt.Errorf("%w: publish %s: %v", ErrBroker, m.Order.ID, err)
	}
	return nil
}

// groupOpts are the options of a member of group: short sessions and
// heartbeats, so a crashed member's partitions move within about AckWait.
func (b *kafkaBroker) groupOpts(group string, extra ...kgo.Opt) []kgo.Opt {
	return append([]kgo.Opt{
		kgo.SeedBrokers(b.cluster.ListenAddrs()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(b.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.SessionTimeout(b.session), kgo.HeartbeatInterval(100 * time.Millisecond), kgo.RebalanceTimeout(2 * time.Second),
	}, extra...)
}

// consumeIdem runs one idem consumer process: kafka.NewConsumer in the
// "idem" group, whose hooks count what happens and inject the chaos. A
// crash (after the record is durable, before its offset is committed)
// cuts the process's connections and ends it: the offset never reaches
// the broker, and the record comes back to the member that takes its
// partition, where it is a duplicate.
func (b *kafkaBroker) consumeIdem(ctx context.Context, r *runner) {
	s := r.idem
	line := &kafkaLine{}
	// A crashed consumer's last commit and dead-letter produces fail
	// within a second or two on the cut line instead of retrying for the
	// defaults' 10-30s: the process is gone, and a run must end soon.
	cl, err := kgo.NewClient(kafka.ClientOptions(b.groupOpts("idem", kgo.Dialer(line.dial), kgo.RequestRetries(3))...)...)
	if err != nil {
		s.fail(fmt.Errorf("the broker: %w", err))
		sleep(ctx, 50*time.Millisecond)
		return
	}
	cctx, kill := context.WithCancel(ctx)
	defer kill()
	crash := func() {
		line.cut()
		kill()
	}
	defer func() {
		if line.isCut() {
			// Gone without a word: no leave, so the group moves the
			// partitions when the session runs out.
			gone, cancel := context.WithCancel(context.Background())
			cancel()
			cl.LeaveGroupContext(gone)
		}
		cl.Close()
	}()
	f := newTryFaults(r, kafkaSeq)
	h, err := adapterHandler(r, func(rec *kgo.Record) (Order, bool, error) {
		var o Order
		if err := json.Unmarshal(rec.Value, &o); err != nil || kafkaSeq(rec) == 0 {
			return o, false, idem.Permanent(errors.New("not a demo order"))
		}
		return o, f.of(rec) == faultHandler, nil
	}, kafka.Handle, kafka.HandleTx[*sql.Tx], kafka.HandleTx[pgx.Tx])
	if err != nil {
		s.fail(err)
		sleep(ctx, time.Second)
		return
	}
	c, err := kafka.NewConsumer(cl, r.guard, h, kafka.Options{DeadLetterTopic: b.dlq, CommitInterval: kafkaCommit, DeadLetterTimeout: 2 * time.Second, Hooks: broker.Hooks[*kgo.Record]{
		BeforeSettle: func(_ context.Context, rec *kgo.Record, rep broker.Report) {
			fl := f.of(rec)
			if rep.Result.Outcome != idem.OutcomeProcessed && (fl == faultCrash || fl == faultAckLost) {
				// A crash sends every record done since the last
				// commit back to the group: drawn again on those
				// duplicates, crashes would breed crashes. It comes
				// where it matters, after a charge, as in idem chaos.
				fl = faultNone
			}
			r.beforeSettle(rep, fl, crash)
		},
		AfterSettle: func(_ context.Context, rec *kgo.Record, rep broker.Report) {
			f.done(rec)
			// Crashed (or the run is over), the record's offset is
			// not committed: the member that takes its partition
			// settles it.
			r.afterSettle(kafkaSeq(rec), rep, cctx.Err() != nil)
		},
	}})
	if err != nil {
		s.fail(err)
		sleep(ctx, time.Second)
		return
	}
	_ = c.Run(cctx)
}

// kafkaCommit is how often the consumers commit: a crash sends what was
// done since back to the group, whose deliveries draw the chaos again.
const kafkaCommit = 50 * time.Millisecond

// kafkaLine is a consumer process's network to the broker: cut, it closes
// every connection and refuses new ones, as for a process that died.
type kafkaLine struct {
	mu    sync.Mutex
	dead  bool
	conns []net.Conn
}

var errLineCut = errors.New("the consumer crashed (its connections are cut)")

func (l *kafkaLine) dial(ctx context.Context, network, host string) (net.Conn, error) {
	if l.isCut() {
		return nil, errLineCut
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead {
		c.Close()
		return nil, errLineCut
	}
	l.conns = append(l.conns, c)
	return c, nil
}

func (l *kafkaLine) isCut() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
}

func (l *kafkaLine) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dead = true
	for _, c := range l.conns {
		c.Close()
	}
}

func kafkaSeq(rec *kgo.Record) uint64 { return seqOf(kafkaHeader(rec, seqHeader)) }

func kafkaHeader(rec *kgo.Record, name string) string {
	for _, h := range rec.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

// open starts a naive consumer process: a plain kgo member of the "naive"
// group that marks each record it settled and commits the marks every
// 200ms and when it leaves.
func (b *kafkaBroker) open(_ context.Context, group string) (session, error) {
	cl, err := kgo.NewClient(b.groupOpts(group, kgo.AutoCommitMarks(), kgo.AutoCommitInterval(200*time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	return &kafkaSession{b: b, cl: cl}, nil
}

type kafkaSession struct {
	b  *kafkaBroker
	cl *kgo.Client
}

// fetch polls what arrives within a short wait. Kafka cannot redeliver
// one record: a retried record is handed again, after its delay, before
// the next one (the session holds its place), so no later mark commits
// past it.
func (s *kafkaSession) fetch(ctx context.Context) iter.Seq[delivery] {
	return func(yield func(delivery) bool) {
		pctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		fs := s.cl.PollRecords(pctx, 64)
		cancel()
		if fs.IsClientClosed() {
			sleep(ctx, 50*time.Millisecond)
			return
		}
		for _, rec := range fs.Records() {
			d := &kafkaDelivery{s: s, rec: rec}
			for {
				if !yield(d) {
					return
				}
				if !d.again {
					break
				}
				d.again = false
				sleep(ctx, d.delay)
				if ctx.Err() != nil {
					return
				}
			}
		}
	}
}

// close closes the session's client: the marks of what it settled are
// committed as it leaves the group, and what it did not settle comes back
// to the group from its last committed offset.
func (s *kafkaSession) close() { s.cl.Close() }

type kafkaDelivery struct {
	s     *kafkaSession
	rec   *kgo.Record
	again bool
	delay time.Duration
}

func (d *kafkaDelivery) seq() uint64  { return kafkaSeq(d.rec) }
func (d *kafkaDelivery) data() []byte { return d.rec.Value }
func (d *kafkaDelivery) key() string  { return kafkaHeader(d.rec, orderHeader) }

func (d *kafkaDelivery) ack(context.Context) error {
	d.s.cl.MarkCommitRecords(d.rec)
	return nil
}

func (d *kafkaDelivery) retry(delay time.Duration) { d.again, d.delay = true, delay }

func (d *kafkaDelivery) deadLetter(ctx context.Context, reason string, cause error) error {
	dl := kafka.DeadLetter(d.s.b.dlq, d.rec, map[string]string{
		idem.HeaderReason: reason, idem.HeaderError: strings.ReplaceAll(cause.Error(), "\n", " "),
	})
	if err := d.s.b.producer.ProduceSync(ctx, dl).FirstErr(); err != nil {
		return err
	}
	return d.ack(ctx)
}
