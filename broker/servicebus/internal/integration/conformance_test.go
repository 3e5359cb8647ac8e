package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/brokertest"
	"github.com/idemgo/idem/broker/servicebus"
	"github.com/idemgo/idem/broker/servicebus/servicebustest"
)

// TestConformance runs broker/brokertest on the in-process Service Bus:
// the real azservicebus client, a queue per case, each consumer on a
// client (a connection) of its own so that Kill cuts it off alone.
func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Broker { return newBroker(t) })
}

// TestConformanceSessions runs broker/brokertest on a session-enabled
// queue with the session consumer (NewSessionConsumer): each message's
// session is its OrderKey (else one of eight, from its id), so OrderKept
// runs, the messages of one key in one session.
func TestConformanceSessions(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Broker {
		b := newBroker(t)
		b.sessions = true
		return b
	})
}

// testLock is the queues' lock duration: short, so that a killed
// consumer's messages come back soon; renewed every third of it.
const testLock = 2 * time.Second

var queues atomic.Int64

type sbBroker struct {
	t        *testing.T
	srv      *servicebustest.Server
	queue    string
	client   *azservicebus.Client
	sessions bool // a session-enabled queue and the session consumer

	once   sync.Once // creates the queue, the sender and dlq on first use
	err    error
	sender *azservicebus.Sender
	// dedup asks ready for a queue with duplicate detection (set by
	// PublishDeduplicated); dedupOn says the queue has it.
	dedup, dedupOn atomic.Bool

	mu       sync.Mutex
	dls      []brokertest.DeadLetter
	raw      []*azservicebus.ReceivedMessage // each dead letter as received, for Replay
	replayed int                             // dead letters replayed so far
	dlq      *azservicebus.Receiver
}

// newBroker is a case's broker on a server of its own, with a client of
// its own for publishing and reading dead letters.
func newBroker(t *testing.T) *sbBroker {
	srv, err := servicebustest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	client, err := azservicebus.NewClientFromConnectionString(srv.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(context.Background()) })
	return &sbBroker{t: t, srv: srv, queue: fmt.Sprintf("q%d", queues.Add(1)), client: client}
}

// ready creates the case's queue on first use, with the entity's
// MaxDeliveryCount the first consumer's MaxDeliveries (the way a user sets
// MaxDeliveries to the entity's), so that Service Bus dead-letters on its
// own at that limit as it would; Service Bus's default where none is set
// or a case publishes first.
func (b *sbBroker) ready(maxDeliveries int) error {
	b.once.Do(func() {
		b.dedupOn.Store(b.dedup.Load())
		if b.err = b.srv.CreateQueue(b.queue, servicebustest.QueueOptions{LockDuration: testLock, MaxDeliveryCount: maxDeliveries,
			RequiresSession: b.sessions, RequiresDuplicateDetection: b.dedupOn.Load()}); b.err != nil {
			return
		}
		if b.sender, b.err = b.client.NewSender(b.queue, nil); b.err != nil {
			return
		}
		b.dlq, b.err = b.client.NewReceiverForQueue(b.queue, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	})
	return b.err
}

func (b *sbBroker) Features() brokertest.Features {
	if b.sessions {
		return brokertest.Features{Ordered: true, DeliveryLimit: true, Redelivery: testLock}
	}
	return brokertest.Features{DeliveryLimit: true, Redelivery: testLock, Skip: map[string]string{
		"OrderKept": "a queue without sessions keeps no order between competing receivers and abandoned messages",
	}}
}

func (b *sbBroker) Publish(ctx context.Context, msgs ...brokertest.Message) error {
	if err := b.ready(0); err != nil {
		return err
	}
	for len(msgs) > 0 {
		batch, err := b.sender.NewMessageBatch(ctx, nil)
		if err != nil {
			return err
		}
		if msgs[0].ID == "" {
			// A batch gives a message without an id a random one: send it
			// alone, without any.
			if err := b.sender.SendMessage(ctx, b.toMessage(msgs[0]), nil); err != nil {
				return err
			}
			msgs = msgs[1:]
			continue
		}
		n := 0
		for _, m := range msgs {
			if m.ID == "" {
				break
			}
			if err := batch.AddMessage(b.toMessage(m), nil); err != nil {
				if n == 0 {
					return err
				}
				break // full: send what it holds
			}
			n++
		}
		if err := b.sender.SendMessageBatch(ctx, batch, nil); err != nil {
			return err
		}
		msgs = msgs[n:]
	}
	return nil
}

// PublishDeduplicated sends each message with servicebus.Send (Idem-Id
// the id, MessageID its idem.DedupID) to a queue with duplicate detection
// (Service Bus's default ten-minute window), which it creates: an entity
// takes duplicate detection only when it is created, so it must come
// before Start.
func (b *sbBroker) PublishDeduplicated(ctx context.Context, msgs ...brokertest.Message) error {
	b.dedup.Store(true)
	if err := b.ready(0); err != nil {
		return err
	}
	if !b.dedupOn.Load() {
		return errors.New("the queue exists without duplicate detection: PublishDeduplicated must come before Start and Publish")
	}
	for _, m := range msgs {
		if err := servicebus.Send(ctx, b.sender, m.ID, b.toMessage(m)); err != nil {
			return err
		}
	}
	return nil
}

func (b *sbBroker) toMessage(m brokertest.Message) *azservicebus.Message {
	sm := &azservicebus.Message{Body: m.Payload}
	if b.sessions {
		session := m.OrderKey
		if session == "" {
			h := fnv.New32a()
			h.Write([]byte(m.ID))
			session = fmt.Sprint("s", h.Sum32()%8)
		}
		sm.SessionID = &session
	}
	if m.ID != "" {
		id := m.ID
		sm.MessageID = &id
	}
	if len(m.Headers) > 0 {
		sm.ApplicationProperties = map[string]any{}
		for k, v := range m.Headers {
			sm.ApplicationProperties[k] = v
		}
	}
	return sm
}

// DeadLetters receives what the dead-letter queue holds beyond what was
// read before, and completes it.
func (b *sbBroker) DeadLetters(ctx context.Context) ([]brokertest.DeadLetter, error) {
	if err := b.ready(0); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	st, err := b.srv.Stats(b.queue)
	if err != nil {
		return nil, err
	}
	for n := st.DeadLettered; n > 0; {
		msgs, err := b.dlq.ReceiveMessages(ctx, n, nil)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			dl, err := servicebus.DeadLetterOf(m)
			if err != nil {
				return nil, err
			}
			b.dls = append(b.dls, brokertest.DeadLetter{ID: dl.ID, Payload: dl.Payload, Headers: dl.Headers})
			b.raw = append(b.raw, m)
			if err := b.dlq.CompleteMessage(ctx, m, nil); err != nil {
				return nil, err
			}
			n--
		}
	}
	return append([]brokertest.DeadLetter(nil), b.dls...), nil
}

// Replay re-sends, with servicebus.Replay, every dead letter received and
// not yet replayed.
func (b *sbBroker) Replay(ctx context.Context) (int, error) {
	if err := b.ready(0); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, m := range b.raw[b.replayed:] {
		if err := servicebus.Replay(ctx, b.sender, m); err != nil {
			return n, err
		}
		b.replayed++
		n++
	}
	return n, nil
}

type running struct {
	cancel context.CancelFunc
	done   chan error
	client *azservicebus.Client
	killed atomic.Bool
}

func (b *sbBroker) Start(ctx context.Context, c brokertest.Consumer) (brokertest.Running, error) {
	h := servicebus.Handle(func(ctx context.Context, m *azservicebus.ReceivedMessage) ([]byte, error) {
		return c.Handle(ctx, servicebus.MessageOf(m))
	})
	if c.HandleTx != nil {
		h = servicebus.HandleTx(func(ctx context.Context, tx *sql.Tx, m *azservicebus.ReceivedMessage) ([]byte, error) {
			return c.HandleTx(ctx, tx, servicebus.MessageOf(m))
		})
	}
	if err := b.ready(c.MaxDeliveries); err != nil {
		return nil, err
	}
	client, err := azservicebus.NewClientFromConnectionString(b.srv.ConnectionString(), nil)
	if err != nil {
		return nil, err
	}
	opts := servicebus.Options{EntityPath: b.queue, Concurrency: c.Concurrency,
		MaxDeliveries:   c.MaxDeliveries,
		ShutdownTimeout: 10 * time.Second,
		Hooks: broker.Hooks[*azservicebus.ReceivedMessage]{
			OnError: func(err error) {
				b.t.Log("consumer:", err)
				if c.Hooks.OnError != nil {
					c.Hooks.OnError(err)
				}
			},
		}}
	if c.RetryBackoff > 0 {
		opts.Backoff = func(int) time.Duration { return c.RetryBackoff }
	} else {
		opts.Backoff = func(int) time.Duration { return 50 * time.Millisecond }
	}
	wrap := func(f func(context.Context, idem.Message, broker.Report)) func(context.Context, *azservicebus.ReceivedMessage, broker.Report) {
		if f == nil {
			return nil
		}
		return func(ctx context.Context, m *azservicebus.ReceivedMessage, r broker.Report) {
			f(ctx, servicebus.MessageOf(m), r)
		}
	}
	opts.Hooks.BeforeSettle = wrap(c.Hooks.BeforeSettle)
	opts.Hooks.AfterSettle = wrap(c.Hooks.AfterSettle)
	opts.Hooks.OnDeadLetter = wrap(c.Hooks.OnDeadLetter)
	var run func(context.Context) error
	if b.sessions {
		opts.SessionIdleTimeout = time.Second // the suite's sessions move between consumers
		cons, err := servicebus.NewSessionConsumer(client, b.queue, c.Guard, h, opts)
		if err != nil {
			client.Close(context.Background())
			return nil, err
		}
		run = cons.Run
	} else {
		recv, err := client.NewReceiverForQueue(b.queue, nil)
		if err != nil {
			return nil, err
		}
		cons, err := servicebus.NewConsumer(recv, c.Guard, h, opts)
		if err != nil {
			client.Close(context.Background())
			return nil, err
		}
		run = cons.Run
	}
	runCtx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1), client: client}
	go func() { r.done <- run(runCtx) }()
	return r, nil
}

func (r *running) Stop() error {
	r.cancel()
	err := <-r.done
	r.client.Close(context.Background())
	return err
}

// Kill closes the consumer's client at once: every settlement after it
// fails, and its locked messages come back when their locks expire.
func (r *running) Kill() {
	if r.killed.Swap(true) {
		return
	}
	r.client.Close(context.Background())
	r.cancel()
}
