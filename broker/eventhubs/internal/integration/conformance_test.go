package integration_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
	"github.com/Azure/go-amqp"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/brokertest"
	"github.com/idemgo/idem/broker/eventhubs"
	"github.com/idemgo/idem/broker/eventhubs/eventhubstest"
)

// TestConformance runs broker/brokertest on the in-process Event Hubs:
// each case on a server of its own with a hub of suitePartitions
// partitions and a dead-letter hub, each consumer an azeventhubs.Processor
// on a client (a connection) of its own, the Processors balancing the
// partitions through one shared checkpoint store.
func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Broker { return newSuiteBroker(t) })
}

const suitePartitions = 4

// suiteBroker is the adapter on one hub, as brokertest sees it.
type suiteBroker struct {
	t    testing.TB
	srv  *eventhubstest.Server
	hub  string
	dlq  string
	prod *azeventhubs.ProducerClient
	cps  azeventhubs.CheckpointStore

	mu       sync.Mutex
	dlc      *azeventhubs.ConsumerClient
	dlr      *azeventhubs.PartitionClient // reads the dead-letter hub from the start
	dls      []brokertest.DeadLetter
	raw      []*azeventhubs.ReceivedEventData // each dead letter as read, for Replay
	replayed int

	down sync.WaitGroup // consumers winding down after Stop or Kill
}

func newSuiteBroker(t testing.TB) *suiteBroker {
	t.Helper()
	srv, err := eventhubstest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	b := &suiteBroker{t: t, srv: srv, hub: "suite", dlq: "suite-dlq", cps: eventhubstest.NewCheckpointStore()}
	if err := srv.CreateHub(b.hub, eventhubstest.HubOptions{Partitions: suitePartitions}); err != nil {
		t.Fatal(err)
	}
	if err := srv.CreateHub(b.dlq, eventhubstest.HubOptions{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	b.prod, err = azeventhubs.NewProducerClientFromConnectionString(srv.ConnectionString(), b.hub, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.down.Wait()
		ctx := context.Background()
		if b.dlr != nil {
			b.dlr.Close(ctx)
			b.dlc.Close(ctx)
		}
		b.prod.Close(ctx)
		srv.Close()
	})
	return b
}

// Features: a partition is read in order, an event retried in place while
// its partition waits. Event Hubs counts no deliveries: Start applies
// MaxDeliveries to Options.MaxDeliveries, the consumer's own limit on an
// event's handler failures, as broker/kafka does. A delivery comes back
// only when its partition's next owner reads it from the checkpoint.
func (b *suiteBroker) Features() brokertest.Features {
	return brokertest.Features{Ordered: true, DeliveryLimit: true}
}

// Publish sends the messages in order: the run of messages sharing an
// OrderKey in one batch to that partition key, each message without one
// on its own to the hub (Event Hubs spreads them round robin). A message
// with an id is sent with eventhubs.Send (MessageID and Idem-Id); one
// without, bare (sendBare).
func (b *suiteBroker) Publish(ctx context.Context, msgs ...brokertest.Message) error {
	for len(msgs) > 0 {
		n := 1
		if k := msgs[0].OrderKey; k != "" {
			for n < len(msgs) && msgs[n].OrderKey == k && msgs[n].ID != "" && msgs[0].ID != "" {
				n++
			}
		}
		var opts *azeventhubs.EventDataBatchOptions
		if k := msgs[0].OrderKey; k != "" {
			opts = &azeventhubs.EventDataBatchOptions{PartitionKey: &k}
		}
		evs := make([]*azeventhubs.EventData, n)
		for i, m := range msgs[:n] {
			evs[i] = &azeventhubs.EventData{Body: m.Payload}
			if m.ID != "" {
				id := m.ID
				evs[i].MessageID = &id
			}
			if len(m.Headers) > 0 {
				evs[i].Properties = map[string]any{}
				for k, v := range m.Headers {
					evs[i].Properties[k] = v
				}
			}
		}
		var err error
		if msgs[0].ID == "" {
			err = b.sendBare(ctx, evs[0])
		} else {
			err = eventhubs.Send(ctx, b.prod, opts, evs...)
		}
		if err != nil {
			return err
		}
		msgs = msgs[n:]
	}
	return nil
}

// sendBare sends ev to the hub with no message id at all (poison). It
// cannot go through azeventhubs, which gives every event it batches a
// MessageID (a random one where the producer set none): it goes through
// go-amqp, as a producer on another SDK would send it.
func (b *suiteBroker) sendBare(ctx context.Context, ev *azeventhubs.EventData) error {
	conn, err := amqp.Dial(ctx, "amqp://"+b.srv.Addr(), &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous()})
	if err != nil {
		return err
	}
	defer conn.Close()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		return err
	}
	snd, err := sess.NewSender(ctx, b.hub, nil)
	if err != nil {
		return err
	}
	m := amqp.NewMessage(ev.Body)
	if len(ev.Properties) > 0 {
		m.ApplicationProperties = ev.Properties
	}
	return snd.Send(ctx, m, nil)
}

// DeadLetters reads the dead-letter hub up to what it holds now.
func (b *suiteBroker) DeadLetters(ctx context.Context) ([]brokertest.DeadLetter, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.srv.Count(b.dlq, "0")
	if err != nil {
		return nil, err
	}
	if len(b.raw) < n && b.dlr == nil {
		if b.dlc, err = azeventhubs.NewConsumerClientFromConnectionString(b.srv.ConnectionString(), b.dlq, azeventhubs.DefaultConsumerGroup, nil); err != nil {
			return nil, err
		}
		yes := true
		if b.dlr, err = b.dlc.NewPartitionClient("0", &azeventhubs.PartitionClientOptions{StartPosition: azeventhubs.StartPosition{Earliest: &yes}}); err != nil {
			return nil, err
		}
	}
	for len(b.raw) < n {
		evs, err := b.dlr.ReceiveEvents(ctx, n-len(b.raw), nil)
		if err != nil {
			return nil, err
		}
		for _, ev := range evs {
			m, err := eventhubs.DeadLetterOf(ev)
			if err != nil {
				return nil, fmt.Errorf("dead letter %d: %w", ev.SequenceNumber, err)
			}
			b.dls = append(b.dls, brokertest.DeadLetter{ID: m.ID, Payload: m.Payload, Headers: m.Headers})
			b.raw = append(b.raw, ev)
		}
	}
	return slices.Clone(b.dls), nil
}

// Replay sends back, with eventhubs.Replay, every dead letter read and
// not yet replayed.
func (b *suiteBroker) Replay(ctx context.Context) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, ev := range b.raw[b.replayed:] {
		if err := eventhubs.Replay(ctx, b.prod, ev); err != nil {
			return n, err
		}
		b.replayed++
		n++
	}
	return n, nil
}

func (b *suiteBroker) Start(_ context.Context, sc brokertest.Consumer) (brokertest.Running, error) {
	h := eventhubs.Handle(func(ctx context.Context, ev *azeventhubs.ReceivedEventData) ([]byte, error) {
		return sc.Handle(ctx, eventhubs.MessageOf(ev))
	})
	if sc.HandleTx != nil {
		h = eventhubs.HandleTx(func(ctx context.Context, tx *sql.Tx, ev *azeventhubs.ReceivedEventData) ([]byte, error) {
			return sc.HandleTx(ctx, tx, eventhubs.MessageOf(ev))
		})
	}
	return b.start(sc, h)
}

// start runs h under sc's guard, options and hooks on a Processor of its
// own.
func (b *suiteBroker) start(sc brokertest.Consumer, h eventhubs.Handler) (*suiteConsumer, error) {
	cps := &killable{CheckpointStore: b.cps}
	p, cc := newProcessor(b.t, b.srv, b.hub, cps)
	dlq, err := azeventhubs.NewProducerClientFromConnectionString(b.srv.ConnectionString(), b.dlq, nil)
	if err != nil {
		cc.Close(context.Background())
		return nil, err
	}
	opts := eventhubs.Options{
		Concurrency: sc.Concurrency, MaxDeliveries: sc.MaxDeliveries, ShutdownTimeout: 10 * time.Second,
		Hooks: eventHooks(b.t, sc.Hooks), DeadLetter: dlq, EventHub: b.hub,
		BatchSize: 20, ReceiveWait: 100 * time.Millisecond,
	}
	if sc.RetryBackoff > 0 {
		opts.Backoff = idem.ExponentialBackoff(sc.RetryBackoff, sc.RetryBackoff)
	} else {
		opts.Backoff = idem.ExponentialBackoff(20*time.Millisecond, 200*time.Millisecond)
	}
	c, err := eventhubs.NewConsumer(p, sc.Guard, h, opts)
	if err != nil {
		cc.Close(context.Background())
		dlq.Close(context.Background())
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &suiteConsumer{b: b, cc: cc, dlq: dlq, cps: cps, cancel: cancel, done: make(chan error, 1)}
	b.down.Add(1)
	go func() { r.done <- c.Run(ctx) }()
	return r, nil
}

// eventHooks calls hooks with the events as MessageOf maps them, and logs
// the consumer's errors.
func eventHooks(t testing.TB, hooks broker.Hooks[idem.Message]) broker.Hooks[*azeventhubs.ReceivedEventData] {
	wrap := func(f func(context.Context, idem.Message, broker.Report)) func(context.Context, *azeventhubs.ReceivedEventData, broker.Report) {
		if f == nil {
			return nil
		}
		return func(ctx context.Context, ev *azeventhubs.ReceivedEventData, r broker.Report) {
			f(ctx, eventhubs.MessageOf(ev), r)
		}
	}
	return broker.Hooks[*azeventhubs.ReceivedEventData]{
		BeforeSettle: wrap(hooks.BeforeSettle),
		AfterSettle:  wrap(hooks.AfterSettle),
		OnDeadLetter: wrap(hooks.OnDeadLetter),
		OnError: func(err error) {
			t.Log("consumer:", err)
			if hooks.OnError != nil {
				hooks.OnError(err)
			}
		},
	}
}

// suiteConsumer is one running consumer with its own client.
type suiteConsumer struct {
	b      *suiteBroker
	cc     *azeventhubs.ConsumerClient
	dlq    *azeventhubs.ProducerClient
	cps    *killable
	cancel context.CancelFunc
	done   chan error // Run's result
	once   sync.Once
	err    error
}

// Stop ends Run (each partition finishes its event, checkpoints, and the
// Processor gives its partitions up), then closes the clients.
func (r *suiteConsumer) Stop() error {
	r.once.Do(func() {
		r.cancel()
		r.err = <-r.done
		r.close()
	})
	return r.err
}

func (r *suiteConsumer) close() {
	ctx := context.Background()
	r.cc.Close(ctx)
	r.dlq.Close(ctx)
	r.b.down.Done()
}

// Kill is a crash: its checkpoint store refuses everything from now on
// (no checkpoint, no ownership renewed or given up: its partitions expire
// and the survivors claim them), its connections close, and the consumer
// winds down in the background.
func (r *suiteConsumer) Kill() {
	r.once.Do(func() {
		r.cps.dead.Store(true)
		ctx := context.Background()
		r.dlq.Close(ctx)
		r.cc.Close(ctx)
		r.cancel()
		go func() {
			<-r.done
			r.close()
		}()
	})
}
