package integration_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/broker/brokertest"
	"github.com/idemgo/idem/internal/consumetest"
)

// TestConformance runs broker/brokertest on the RabbitMQ server: each
// subtest gets a quorum queue of its own and a dead-letter queue; every
// consumer the case starts consumes the quorum queue on a connection of its
// own.
func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Broker { return newSuiteBroker(t) })
}

// suiteBroker is the adapter on one quorum queue, as brokertest sees it.
type suiteBroker struct {
	e     *env
	queue string

	mu       sync.Mutex
	declared bool
	pub      *amqp.Channel // in confirm mode, for Publish
	dls      []brokertest.DeadLetter
	raw      []amqp.Delivery // each dead letter as taken, for Replay
	replayed int             // dead letters replayed so far

	down sync.WaitGroup // consumers winding down after Stop or Kill
}

func newSuiteBroker(t *testing.T) *suiteBroker {
	e := newEnv(t)
	b := &suiteBroker{e: e, queue: e.queue + ".quorum"}
	t.Cleanup(func() {
		b.down.Wait()
		if ch, err := e.conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(b.queue, false, false, false)
			ch.Close()
		}
	})
	return b
}

// declare declares the quorum queue once, with a delivery-limit of
// maxDeliveries when positive (RabbitMQ counts every requeue and every
// return by a closed connection toward it). The suite starts a case's
// consumers, all with the same MaxDeliveries, before it publishes; a
// Publish before any Start declares the queue without a limit.
func (b *suiteBroker) declare(maxDeliveries int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.declared {
		return nil
	}
	ch, err := b.e.conn.Channel()
	if err != nil {
		return err
	}
	args := amqp.Table{"x-queue-type": "quorum"}
	if maxDeliveries > 0 {
		args["x-delivery-limit"] = int64(maxDeliveries)
	}
	if _, err := ch.QueueDeclare(b.queue, true, false, false, false, args); err != nil {
		return fmt.Errorf("declare %s: %w", b.queue, err)
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	b.pub, b.declared = ch, true
	return nil
}

// Features: a quorum queue counts deliveries toward its delivery-limit,
// which declare sets from MaxDeliveries, as Start sets the consumer's
// Options.MaxDeliveries (the adapter dead-letters at that attempt, before
// RabbitMQ would). RabbitMQ keeps no order the adapter preserves: a
// retried delivery is requeued behind what was delivered meanwhile, and
// Concurrency handlers run at once.
func (b *suiteBroker) Features() brokertest.Features {
	return brokertest.Features{DeliveryLimit: true}
}

// Publish sends each message through the default exchange to the queue
// with its id as message-id (none for an empty ID) and waits for every
// publisher confirm. RabbitMQ deduplicates nothing.
func (b *suiteBroker) Publish(ctx context.Context, msgs ...brokertest.Message) error {
	if err := b.declare(0); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	dcs := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	for _, m := range msgs {
		p := amqp.Publishing{MessageId: m.ID, Body: m.Payload, Timestamp: time.Now(), DeliveryMode: amqp.Persistent}
		if len(m.Headers) > 0 {
			p.Headers = amqp.Table{}
			for k, v := range m.Headers {
				p.Headers[k] = v
			}
		}
		dc, err := b.pub.PublishWithDeferredConfirmWithContext(ctx, "", b.queue, false, false, p)
		if err != nil {
			return err
		}
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			return fmt.Errorf("publish not confirmed: %v", err)
		}
	}
	return nil
}

// DeadLetters takes what the dead-letter queue holds and returns every dead
// letter taken so far.
func (b *suiteBroker) DeadLetters(ctx context.Context) ([]brokertest.DeadLetter, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, err := b.e.conn.Channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	for {
		d, ok, err := ch.Get(b.e.dlq, true)
		if err != nil {
			return nil, err
		}
		if !ok {
			return slices.Clone(b.dls), nil
		}
		m, err := amqpidem.DeadLetterOf(d)
		if err != nil {
			return nil, err
		}
		b.dls = append(b.dls, brokertest.DeadLetter{ID: m.ID, Payload: m.Payload, Headers: m.Headers})
		b.raw = append(b.raw, d)
	}
}

// Replay re-publishes, with amqpidem.Replay on the confirming channel,
// every dead letter taken and not yet replayed.
func (b *suiteBroker) Replay(ctx context.Context) (int, error) {
	if err := b.declare(0); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, d := range b.raw[b.replayed:] {
		if err := amqpidem.Replay(ctx, b.pub, d); err != nil {
			return n, err
		}
		b.replayed++
		n++
	}
	return n, nil
}

// Start runs a consumer of the queue on a connection of its own, with its
// dead letters on a channel of their own.
func (b *suiteBroker) Start(_ context.Context, sc brokertest.Consumer) (brokertest.Running, error) {
	if err := b.declare(sc.MaxDeliveries); err != nil {
		return nil, err
	}
	conn, err := amqp.Dial(b.e.url)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, err
	}
	pub, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, err
	}
	c, err := amqpidem.NewConsumer(ch, sc.Guard, consumetest.SuiteHandler(sc, amqpidem.MessageOf), amqpidem.Options{
		Queue:                b.queue,
		DeadLetterRoutingKey: b.e.dlq,
		Publisher:            pub,
		Concurrency:          sc.Concurrency,
		MaxDeliveries:        sc.MaxDeliveries,
		Backoff:              consumetest.Backoff(sc),
		Hooks:                consumetest.Hooks(sc.Hooks, amqpidem.MessageOf),
	})
	if err != nil {
		conn.Close()
		return nil, err
	}
	// Closing the connection after Run ends comes after its acks; closing
	// it at once returns every unacknowledged delivery to the queue.
	kill := func() { conn.Close() }
	return consumetest.Start(&b.down, c.Run, conn.Close, kill), nil
}
