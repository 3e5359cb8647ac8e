package demo

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// amqpBroker is the demo on RabbitMQ: a fanout exchange feeding one queue
// per consumer group, and a dead-letter queue.
type amqpBroker struct {
	label    string
	conn     *amqp.Connection
	exchange string
	queues   map[string]string // group -> queue
	dlq      string

	mu  sync.Mutex // one confirmed publish at a time on pub
	pub *amqp.Channel
}

func startAMQP(ctx context.Context, rawURL, runID string) (_ *amqpBroker, err error) {
	// b is not the named result: a failed start returns nil, and the
	// deferred close below must still reach what it opened.
	b := &amqpBroker{label: dsn.Redact(rawURL), exchange: "idem.demo." + runID, dlq: "idem.demo." + runID + ".dlq",
		queues: map[string]string{"idem": "idem.demo." + runID + ".idem", "naive": "idem.demo." + runID + ".naive"}}
	b.conn, err = amqp.DialConfig(rawURL, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second), Properties: amqp.Table{"connection_name": "idem demo"}})
	if err != nil {
		return nil, amqpConnectErr(b.label, err)
	}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	ch, err := b.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBroker, err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(b.exchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return nil, fmt.Errorf("%w: declare exchange: %v", ErrBroker, err)
	}
	for _, q := range []string{b.queues["idem"], b.queues["naive"], b.dlq} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			return nil, fmt.Errorf("%w: declare queue %s: %v", ErrBroker, q, err)
		}
	}
	for _, q := range []string{b.queues["idem"], b.queues["naive"]} {
		if err := ch.QueueBind(q, "", b.exchange, false, nil); err != nil {
			return nil, fmt.Errorf("%w: bind queue %s: %v", ErrBroker, q, err)
		}
	}
	if b.pub, err = b.conn.Channel(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBroker, err)
	}
	if err := b.pub.Confirm(false); err != nil {
		return nil, fmt.Errorf("%w: publisher confirms: %v", ErrBroker, err)
	}
	return b, nil
}

// amqpConnectErr says why the demo could not connect to RabbitMQ at label:
// a refused login (403 ACCESS_REFUSED) is not a server that is down.
func amqpConnectErr(label string, err error) error {
	var ae *amqp.Error
	var ne net.Error
	switch {
	case errors.As(err, &ae) && ae.Code == amqp.AccessRefused:
		return fmt.Errorf("%w: RabbitMQ at %s: %v (check the user and password in the URL; "+
			"RabbitMQ's guest user logs in only from localhost)", ErrBrokerAuth, label, err)
	case errors.As(err, &ne):
		return fmt.Errorf("%w: no RabbitMQ server answers at %s: %v (is it running and the address right? start it with: rabbitmq-server -detached)",
			ErrBroker, label, err)
	}
	return fmt.Errorf("%w: cannot connect to %s: %v", ErrBroker, label, err)
}

func (b *amqpBroker) name() string         { return b.label }
func (b *amqpBroker) lostAckCrashes() bool { return true }

// close deletes the run's queues and exchange and closes the connection.
func (b *amqpBroker) close() {
	if b.conn == nil || b.conn.IsClosed() {
		return
	}
	if ch, err := b.conn.Channel(); err == nil {
		for _, q := range []string{b.queues["idem"], b.queues["naive"], b.dlq} {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		_ = ch.ExchangeDelete(b.exchange, false, false)
		ch.Close()
	}
	b.conn.Close()
}

// confirmed publishes and waits for the broker's confirm.
func (b *amqpBroker) confirmed(ctx context.Context, exchange, key string, p amqp.Publishing) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	dc, err := b.pub.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, p)
	if err != nil {
		return err
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("the broker refused the message (nack)")
	}
	return nil
}

func (b *amqpBroker) publish(ctx context.Context, m message, seq uint64) error {
	err := b.confirmed(ctx, b.exchange, "", amqp.Publishing{
		Headers:     amqp.Table{orderHeader: m.Order.ID, seqHeader: strconv.FormatUint(seq, 10)},
		ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: m.Order.ID, Body: m.payload(),
	})
	if err != nil {
		return fmt.Errorf("%w: publish %s: %v", ErrBroker, m.Order.ID, err)
	}
	return nil
}

// open starts a consumer on its own channel; the group's sessions share the
// group's queue and compete for its messages.
func (b *amqpBroker) open(ctx context.Context, group string) (session, error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Qos(16, 0, false); err != nil {
		ch.Close()
		return nil, err
	}
	ds, err := ch.Consume(b.queues[group], "", false, false, false, false, nil)
	if err != nil {
		ch.Close()
		return nil, err
	}
	return &amqpSession{b: b, ch: ch, ds: ds}, nil
}

type amqpSession struct {
	b  *amqpBroker
	ch *amqp.Channel
	ds <-chan amqp.Delivery
}

// fetch yields deliveries until none arrives for 250ms.
func (s *amqpSession) fetch(ctx context.Context) iter.Seq[delivery] {
	return func(yield func(delivery) bool) {
		idle := time.NewTimer(250 * time.Millisecond)
		defer idle.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-idle.C:
				return
			case d, ok := <-s.ds:
				if !ok {
					// The channel died: behave like a crashed process.
					sleep(ctx, 50*time.Millisecond)
					return
				}
				seq, _ := strconv.ParseUint(fmt.Sprint(d.Headers[seqHeader]), 10, 64)
				if !yield(&amqpDelivery{b: s.b, d: d, sq: seq, ctx: ctx}) {
					return
				}
				idle.Reset(250 * time.Millisecond)
			}
		}
	}
}

// close closes the channel without acking: RabbitMQ requeues what the
// session held, as it does for a process that died. The deliveries still
// buffered are drained meanwhile: the client blocks Close until nobody is
// left waiting to hand one over.
func (s *amqpSession) close() {
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for range s.ds {
		}
	}()
	s.ch.Close()
	<-drained
}

type amqpDelivery struct {
	b   *amqpBroker
	d   amqp.Delivery
	sq  uint64
	ctx context.Context
}

func (d *amqpDelivery) seq() uint64  { return d.sq }
func (d *amqpDelivery) data() []byte { return d.d.Body }
func (d *amqpDelivery) key() string  { s, _ := d.d.Headers[orderHeader].(string); return s }

func (d *amqpDelivery) ack(context.Context) error { return d.d.Ack(false) }

// retry holds the delivery for delay, then requeues it: AMQP has no delayed
// requeue, and an immediate one would spin.
func (d *amqpDelivery) retry(delay time.Duration) {
	sleep(d.ctx, delay)
	_ = d.d.Nack(false, true)
}

func (d *amqpDelivery) deadLetter(ctx context.Context, reason string, cause error) error {
	h := amqp.Table{}
	for k, v := range d.d.Headers {
		h[k] = v
	}
	h["x-idem-reason"] = reason
	h["x-idem-error"] = strings.ReplaceAll(cause.Error(), "\n", " ")
	if err := d.b.confirmed(ctx, "", d.b.dlq, amqp.Publishing{Headers: h, ContentType: d.d.ContentType,
		DeliveryMode: amqp.Persistent, Body: d.d.Body}); err != nil {
		return err
	}
	return d.d.Ack(false)
}
