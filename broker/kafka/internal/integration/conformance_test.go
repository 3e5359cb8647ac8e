package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/brokertest"
	"github.com/idemgo/idem/broker/kafka"
)

// TestConformance runs broker/brokertest on the in-process cluster: each
// subtest gets a cluster of its own, with a topic of suitePartitions
// partitions, its dead-letter topic and one consumer group.
func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Broker { return newSuiteBroker(t) })
}

const suitePartitions = 4

// suiteBroker is the adapter on one topic, as brokertest sees it.
type suiteBroker struct {
	t     *testing.T
	c     *kfake.Cluster
	topic string
	dlq   string
	group string
	prod  *kgo.Client // producer, with the partition chosen here
	adm   *kadm.Client
	next  atomic.Int32 // round robin over partitions for records without OrderKey
	// clientOpts are added to every client's options.
	clientOpts []kgo.Opt

	mu       sync.Mutex
	dlr      *kgo.Client // reads the dead-letter topic from the start
	dls      []brokertest.DeadLetter
	read     int64         // next dead-letter offset to read
	raw      []*kgo.Record // each dead letter as read, for Replay
	replayed int           // dead letters replayed so far

	down sync.WaitGroup // consumers winding down after Stop or Kill
}

func newSuiteBroker(t *testing.T) *suiteBroker { return newSuiteBrokerWith(t, nil) }

// newSuiteBrokerWith is newSuiteBroker on a cluster with more options
// (kfake.NumBrokers(3) for several brokers), and more options for every
// client.
func newSuiteBrokerWith(t *testing.T, opts []kfake.Opt, clientOpts ...kgo.Opt) *suiteBroker {
	t.Helper()
	b := &suiteBroker{t: t, topic: "suite", dlq: "suite.dlq", group: "suite-group", clientOpts: clientOpts}
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1),
		kfake.SeedTopics(suitePartitions, b.topic), kfake.SeedTopics(1, b.dlq),
		// A killed member must leave the group within a second, so that
		// its partitions reach the survivors promptly.
		kfake.GroupMinSessionTimeout(100 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	b.c = c
	b.prod, err = kgo.NewClient(b.opts(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	b.adm = kadm.NewClient(b.prod)
	b.dlr, err = kgo.NewClient(b.opts(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(b.dlq),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.down.Wait()
		b.dlr.Close()
		b.prod.Close()
		c.Close()
	})
	return b
}

// opts are the given client options, then clientOpts.
func (b *suiteBroker) opts(given ...kgo.Opt) []kgo.Opt { return slices.Concat(given, b.clientOpts) }

// Features: Kafka keeps the order of a partition, and Publish puts the
// messages of one OrderKey on one partition (as the record's key). Kafka
// counts no deliveries, so it has no delivery limit of its own: Start
// applies MaxDeliveries to Options.MaxDeliveries, the consumer's limit on a
// record's handler failures in a row (a key in progress elsewhere never
// counts toward it), which the suite holds to the same rule.
func (b *suiteBroker) Features() brokertest.Features {
	return brokertest.Features{Ordered: true, DeliveryLimit: true}
}

func (b *suiteBroker) Publish(ctx context.Context, msgs ...brokertest.Message) error {
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		r := &kgo.Record{Topic: b.topic, Value: m.Payload}
		if m.ID != "" {
			r = kafka.Record(b.topic, "", m.ID, m.Payload)
		}
		for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(m.Headers[k])})
		}
		if m.OrderKey != "" {
			r.Key = []byte(m.OrderKey)
			h := fnv.New32a()
			h.Write(r.Key)
			r.Partition = int32(h.Sum32() % suitePartitions)
		} else {
			r.Partition = (b.next.Add(1) - 1) % suitePartitions
		}
		recs[i] = r
	}
	return b.prod.ProduceSync(ctx, recs...).FirstErr()
}

// DeadLetters reads the dead-letter topic up to its current end.
func (b *suiteBroker) DeadLetters(ctx context.Context) ([]brokertest.DeadLetter, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ends, err := b.adm.ListEndOffsets(ctx, b.dlq)
	if err != nil {
		return nil, err
	}
	end, _ := ends.Lookup(b.dlq, 0)
	if end.Err != nil {
		return nil, end.Err
	}
	for b.read < end.Offset {
		fs := b.dlr.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return nil, errs[0].Err
		}
		var notDL error
		fs.EachRecord(func(r *kgo.Record) {
			m, err := kafka.DeadLetterOf(r)
			if err != nil {
				notDL = fmt.Errorf("dead letter %d: %w", r.Offset, err)
			}
			b.dls = append(b.dls, brokertest.DeadLetter{ID: m.ID, Payload: m.Payload, Headers: m.Headers})
			b.raw = append(b.raw, r)
			b.read = r.Offset + 1
		})
		if notDL != nil {
			return nil, notDL
		}
	}
	return slices.Clone(b.dls), nil
}

// Replay re-produces, with kafka.Replay, every dead letter read and not
// yet replayed.
func (b *suiteBroker) Replay(ctx context.Context) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, r := range b.raw[b.replayed:] {
		if err := kafka.Replay(ctx, b.prod, r); err != nil {
			return n, err
		}
		b.replayed++
		n++
	}
	return n, nil
}

func (b *suiteBroker) Start(_ context.Context, sc brokertest.Consumer) (brokertest.Running, error) {
	h := kafka.Handle(func(ctx context.Context, rec *kgo.Record) ([]byte, error) {
		return sc.Handle(ctx, kafka.MessageOf(rec))
	})
	if sc.HandleTx != nil {
		h = kafka.HandleTx(func(ctx context.Context, tx *sql.Tx, rec *kgo.Record) ([]byte, error) {
			return sc.HandleTx(ctx, tx, kafka.MessageOf(rec))
		})
	}
	opts := kafka.Options{Concurrency: sc.Concurrency, MaxDeliveries: sc.MaxDeliveries, Hooks: recordHooks(sc.Hooks), DeadLetterTopic: b.dlq, CommitInterval: 50 * time.Millisecond}
	if sc.RetryBackoff > 0 {
		opts.Backoff = idem.ExponentialBackoff(sc.RetryBackoff, sc.RetryBackoff)
	}
	conns := &connKill{}
	cl, err := kgo.NewClient(kafka.ClientOptions(b.opts(
		kgo.SeedBrokers(b.c.ListenAddrs()...),
		kgo.ConsumerGroup(b.group),
		kgo.ConsumeTopics(b.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(50*time.Millisecond),
		kgo.HeartbeatInterval(100*time.Millisecond),
		kgo.SessionTimeout(time.Second),
		kgo.Dialer(conns.dial),
		// A killed consumer's dead-letter produce in flight is not
		// cancelled by its context under idempotent production (see
		// Options.DeadLetterTimeout): the hard bound the doc advises, so a
		// Kill cannot leave Run waiting on it (seen hanging a CI run).
		kgo.RecordDeliveryTimeout(5*time.Second),
	)...)...)
	if err != nil {
		return nil, err
	}
	c, err := kafka.NewConsumer(cl, sc.Guard, h, opts)
	if err != nil {
		cl.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &suiteConsumer{b: b, cl: cl, conns: conns, cancel: cancel, done: make(chan error, 1)}
	b.down.Add(1)
	go func() { r.done <- c.Run(ctx) }()
	return r, nil
}

// recordHooks calls hooks with the records as MessageOf maps them.
func recordHooks(hooks broker.Hooks[idem.Message]) broker.Hooks[*kgo.Record] {
	wrap := func(f func(context.Context, idem.Message, broker.Report)) func(context.Context, *kgo.Record, broker.Report) {
		if f == nil {
			return nil
		}
		return func(ctx context.Context, rec *kgo.Record, r broker.Report) { f(ctx, kafka.MessageOf(rec), r) }
	}
	return broker.Hooks[*kgo.Record]{
		BeforeSettle: wrap(hooks.BeforeSettle),
		AfterSettle:  wrap(hooks.AfterSettle),
		OnDeadLetter: wrap(hooks.OnDeadLetter),
		OnError:      hooks.OnError,
	}
}

// suiteConsumer is one running consumer with its own client.
type suiteConsumer struct {
	b      *suiteBroker
	cl     *kgo.Client
	conns  *connKill
	cancel context.CancelFunc
	done   chan error // Run's result
	once   sync.Once
	err    error
}

// Stop ends Run (which drains, gives back unrun claims and commits), then
// closes the client, which leaves the group at once.
func (r *suiteConsumer) Stop() error {
	r.once.Do(func() {
		r.cancel()
		r.err = <-r.done
		r.cl.Close()
		r.b.down.Done()
	})
	return r.err
}

// Kill is a crash: the client's connections are cut and no new ones are
// made, so nothing more reaches the broker (no commit, no dead letter, no
// leave: the member drops out of the group when its session times out).
// The consumer then winds down in the background.
func (r *suiteConsumer) Kill() {
	r.once.Do(func() {
		r.conns.kill()
		r.cancel()
		go func() {
			defer r.b.down.Done()
			<-r.done
			gone, cancel := context.WithCancel(context.Background())
			cancel()
			r.cl.LeaveGroupContext(gone) // nothing to say to the group: don't wait for it
			r.cl.Close()
		}()
	})
}

// connKill is a client's dialer, which can cut every connection it made
// and refuse new ones.
type connKill struct {
	mu    sync.Mutex
	dead  bool
	conns []net.Conn
}

var errKilled = errors.New("connection killed by the test")

func (k *connKill) dial(ctx context.Context, network, host string) (net.Conn, error) {
	if k.isDead() {
		return nil, errKilled
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		c.Close()
		return nil, errKilled
	}
	k.conns = append(k.conns, c)
	return c, nil
}

func (k *connKill) isDead() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.dead
}

func (k *connKill) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dead = true
	for _, c := range k.conns {
		c.Close()
	}
}

// String names the topic in failures.
func (b *suiteBroker) String() string { return fmt.Sprintf("kfake %s", b.topic) }
