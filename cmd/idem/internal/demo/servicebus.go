package demo

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/servicebus"
	"github.com/idemgo/idem/broker/servicebus/servicebustest"
	"github.com/idemgo/idem/outbox"
	outboxservicebus "github.com/idemgo/idem/outbox/servicebus"
)

// sbMaxDeliveryCount is the subscriptions' MaxDeliveryCount: well above
// the deliveries the chaos can cost a message (maxFaultyDelivery), so that
// Service Bus never dead-letters one behind the demo's back.
const sbMaxDeliveryCount = 100

// sbBroker is the demo on an in-process Azure Service Bus: a topic with
// duplicate detection and one subscription per consumer group, each
// consumer process on a client (an AMQP connection) of its own.
type sbBroker struct {
	cfg    Config
	srv    *servicebustest.Server
	topic  string
	client *azservicebus.Client // the producer's
	sender *azservicebus.Sender
}

func startServiceBus(ctx context.Context, runID string, cfg Config) (_ *sbBroker, err error) {
	b := &sbBroker{cfg: cfg, topic: "idem-demo-" + runID}
	if b.srv, err = servicebustest.NewServer(); err != nil {
		return nil, fmt.Errorf("%w: in-process Service Bus: %v", ErrBroker, err)
	}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	// Duplicate detection is the topic's: a producer retry inside its
	// window reaches neither subscription.
	if err := b.srv.CreateTopic(b.topic, servicebustest.QueueOptions{RequiresDuplicateDetection: true}); err != nil {
		return nil, fmt.Errorf("%w: create topic %s: %v", ErrBroker, b.topic, err)
	}
	for _, group := range []string{"idem", "naive"} {
		if err := b.srv.CreateSubscription(b.topic, group, servicebustest.QueueOptions{
			LockDuration: cfg.AckWait, MaxDeliveryCount: sbMaxDeliveryCount,
		}); err != nil {
			return nil, fmt.Errorf("%w: create subscription %s: %v", ErrBroker, group, err)
		}
	}
	if b.client, err = azservicebus.NewClientFromConnectionString(b.srv.ConnectionString(), nil); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBroker, err)
	}
	if b.sender, err = b.client.NewSender(b.topic, nil); err != nil {
		return nil, fmt.Errorf("%w: sender: %v", ErrBroker, err)
	}
	return b, nil
}

func (b *sbBroker) name() string { return "in-process Azure Service Bus (servicebustest)" }

// lostAckCrashes: the adapter settles a message itself, so a lost
// complete is injected as a crash (the consumer's client closed before
// the complete), on the naive side too for the same chaos.
func (b *sbBroker) lostAckCrashes() bool { return true }

// dropsRetries: servicebus.Send makes the MessageID of the order id and
// the content's digest, so the topic's duplicate detection drops a retry
// and lets a reused id with other content through.
func (b *sbBroker) dropsRetries() bool { return true }

func (b *sbBroker) close() {
	if b.client != nil {
		b.client.Close(context.Background())
	}
	if b.srv != nil {
		b.srv.Close()
	}
}

func (b *sbBroker) publish(ctx context.Context, m message, seq uint64) error {
	ct := "application/json"
	err := servicebus.Send(ctx, b.sender, m.Order.ID, &azservicebus.Message{
		Body: m.payload(), ContentType: &ct,
		ApplicationProperties: map[string]any{orderHeader: m.Order.ID, seqHeader: strconv.FormatUint(seq, 10)},
	})
	if err != nil {
		return fmt.Errorf("%w: publish %s: %v", ErrBroker, m.Order.ID, err)
	}
	return nil
}

// outboxPublisher is outbox/servicebus on the producer's client, to the
// topic: the relay's sends carry the MessageID servicebus.Send would give
// them, so the topic's duplicate detection treats them alike.
func (b *sbBroker) outboxPublisher() (outbox.Publisher, string, error) {
	pub, err := outboxservicebus.New(b.client, outboxservicebus.Options{})
	return pub, b.topic, err
}

// receiver opens a client of its own and a PeekLock receiver on the
// group's subscription: closing the client is a consumer process dying.
func (b *sbBroker) receiver(group string) (*azservicebus.Client, *azservicebus.Receiver, error) {
	client, err := azservicebus.NewClientFromConnectionString(b.srv.ConnectionString(), nil)
	if err != nil {
		return nil, nil, err
	}
	r, err := client.NewReceiverForSubscription(b.topic, group, nil)
	if err != nil {
		client.Close(context.Background())
		return nil, nil, err
	}
	return client, r, nil
}

// consumeIdem runs one idem consumer process: servicebus.NewConsumer on
// the "idem" subscription, whose hooks count what happens and inject the
// chaos. A crash (after the record is durable, before the complete) closes
// the process's client: the complete fails, and the message comes back to
// another consumer when its lock runs out, where it is a duplicate.
func (b *sbBroker) consumeIdem(ctx context.Context, r *runner) {
	s := r.idem
	client, recv, err := b.receiver("idem")
	if err != nil {
		s.fail(fmt.Errorf("the broker: %w", err))
		sleep(ctx, 50*time.Millisecond)
		return
	}
	cctx, kill := context.WithCancel(ctx)
	defer kill()
	var once sync.Once
	crash := func() {
		once.Do(func() {
			kill()
			client.Close(context.Background())
		})
	}
	defer crash()
	h, err := b.handler(r)
	if err != nil {
		s.fail(err)
		sleep(ctx, time.Second)
		return
	}
	c, err := servicebus.NewConsumer(recv, r.guard, h, servicebus.Options{EntityPath: servicebus.EntityPath(b.topic, "idem"), Backoff: func(int) time.Duration { return 20 * time.Millisecond },
		MaxDeliveries:   sbMaxDeliveryCount,
		ShutdownTimeout: 5 * time.Second,
		Hooks: broker.Hooks[*azservicebus.ReceivedMessage]{
			BeforeSettle: func(_ context.Context, m *azservicebus.ReceivedMessage, rep broker.Report) {
				r.beforeSettle(rep, b.fault(m), crash)
			},
			AfterSettle: func(_ context.Context, m *azservicebus.ReceivedMessage, rep broker.Report) {
				r.afterSettle(sbSeq(m), rep, rep.BrokerErr != nil && cctx.Err() != nil)
			},
		}})
	if err != nil {
		s.fail(err)
		sleep(ctx, time.Second)
		return
	}
	_ = c.Run(cctx)
}

// fault is the chaos for one delivery, keyed on Service Bus's own
// DeliveryCount: the handler and the hooks of one delivery draw the same.
func (b *sbBroker) fault(m *azservicebus.ReceivedMessage) fault {
	return chaos(b.cfg.Seed, sbSeq(m), uint64(m.DeliveryCount), b.cfg.CrashRate)
}

func sbSeq(m *azservicebus.ReceivedMessage) uint64 {
	v, _ := m.ApplicationProperties[seqHeader].(string)
	seq, _ := strconv.ParseUint(v, 10, 64)
	return seq
}

// handler is the ledger's charge as the adapter's handler.
func (b *sbBroker) handler(r *runner) (servicebus.Handler, error) {
	return adapterHandler(r, func(m *azservicebus.ReceivedMessage) (Order, bool, error) {
		var o Order
		if err := json.Unmarshal(m.Body, &o); err != nil || sbSeq(m) == 0 {
			return o, false, idem.Permanent(errors.New("not a demo order"))
		}
		return o, b.fault(m) == faultHandler, nil
	}, servicebus.Handle, servicebus.HandleTx[*sql.Tx], servicebus.HandleTx[pgx.Tx])
}

// open starts a naive consumer process: a receiver of its own on the
// "naive" subscription, settled by the demo's loop.
func (b *sbBroker) open(_ context.Context, group string) (session, error) {
	client, r, err := b.receiver(group)
	if err != nil {
		return nil, err
	}
	return &sbSession{client: client, r: r}, nil
}

type sbSession struct {
	client *azservicebus.Client
	r      *azservicebus.Receiver
}

// fetch receives what arrives within a short wait; what the session does
// not settle comes back when its lock runs out.
func (s *sbSession) fetch(ctx context.Context) iter.Seq[delivery] {
	return func(yield func(delivery) bool) {
		rctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		msgs, err := s.r.ReceiveMessages(rctx, 16, nil)
		cancel()
		if err != nil && len(msgs) == 0 {
			if !errors.Is(err, context.DeadlineExceeded) {
				sleep(ctx, 50*time.Millisecond)
			}
			return
		}
		for _, m := range msgs {
			if !yield(&sbDelivery{s: s, m: m, ctx: ctx}) {
				return
			}
		}
	}
}

// close closes the session's client without settling: its locked messages
// come back when their locks run out, as a dead process's would.
func (s *sbSession) close() { s.client.Close(context.Background()) }

type sbDelivery struct {
	s   *sbSession
	m   *azservicebus.ReceivedMessage
	ctx context.Context
}

func (d *sbDelivery) seq() uint64  { return sbSeq(d.m) }
func (d *sbDelivery) data() []byte { return d.m.Body }
func (d *sbDelivery) key() string  { k, _ := d.m.ApplicationProperties[orderHeader].(string); return k }

func (d *sbDelivery) ack(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return d.s.r.CompleteMessage(ctx, d.m, nil)
}

// retry holds the message for delay, then abandons it: Service Bus
// redelivers an abandoned message at once.
func (d *sbDelivery) retry(delay time.Duration) {
	sleep(d.ctx, delay)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.ctx), 2*time.Second)
	defer cancel()
	_ = d.s.r.AbandonMessage(ctx, d.m, nil)
}

func (d *sbDelivery) deadLetter(ctx context.Context, reason string, cause error) error {
	desc := strings.ReplaceAll(cause.Error(), "\n", " ")
	return d.s.r.DeadLetterMessage(ctx, d.m, &azservicebus.DeadLetterOptions{Reason: &reason, ErrorDescription: &desc})
}
