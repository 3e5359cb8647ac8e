package amqpidem

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// Dead-letter headers set by the consumer, beside idem's own
// (idem.HeaderReason, idem.HeaderError, idem.HeaderDeadLetterKey,
// idem.HeaderFingerprint and the idem.HeaderStored* headers from
// broker.DeadLetterHeaders: the reason, the error, the key, this message's
// fingerprint and, for a conflict or a parked record, the stored record's
// fingerprint, state, token, attempts and first-claim time).
const (
	HeaderReason     = "x-idem-reason"      // conflict, no_key, invalid_key, parked, invalid_data, permanent, max_deliver (as Idem-Reason)
	HeaderError      = "x-idem-error"       // the error text, one line, at most 1 KiB (as Idem-Error)
	HeaderQueue      = "x-idem-queue"       // the queue the message was consumed from
	HeaderExchange   = "x-idem-exchange"    // the exchange it was published to
	HeaderRoutingKey = "x-idem-routing-key" // its routing key
	HeaderAttempt    = "x-idem-attempt"     // its delivery attempt (x-delivery-count + 1 on quorum queues; 1 or 2 on classic)
	// HeaderDeliveryTag and HeaderConsumerTag name the delivery that was
	// dead-lettered: its tag on its consumer's channel and that consumer.
	// They tie the dead letter to the consumer's logs; they are not the
	// message's place in the queue, which RabbitMQ does not number in
	// classic and quorum queues (a stream queue's x-stream-offset is kept
	// among the original headers).
	HeaderDeliveryTag = "x-idem-delivery-tag"
	HeaderConsumerTag = "x-idem-consumer-tag"
)

// transport is the engine's view of one queue consumed on one channel:
// deliveries in, Ack, Nack with requeue, and dead letters published with a
// confirm before the original is acked. RabbitMQ cannot delay a requeue
// (RetryDelays is false: the engine holds the delivery, unacked, for the
// delay) and never redelivers an unacked message while its channel is
// open, so it needs no keep-alive.
type transport struct {
	ch            *amqp.Channel
	pub           *amqp.Channel
	queue, tag    string
	dlx, dlKey    string
	maxDeliveries int
	onError       func(error)

	// One Run's consumption, set by Consumer.Run before the engine starts.
	deliveries <-chan amqp.Delivery
	closed     <-chan *amqp.Error
	runCtx     context.Context
	ended      atomic.Bool // Receive saw deliveries close
	cancel     *sync.Once  // of the AMQP consumer, once per Run
}

var (
	_ broker.Transport[amqp.Delivery] = (*transport)(nil)
	_ broker.Delayer                  = (*transport)(nil)
	_ broker.Returner[amqp.Delivery]  = (*transport)(nil)
	_ broker.Drainer[amqp.Delivery]   = (*transport)(nil)
)

// start begins a Run's consumption: the prefetch, the dead-letter channel
// in confirm mode, and the AMQP consumer.
func (t *transport) start(ctx context.Context, prefetch int) error {
	if err := t.ch.Qos(prefetch, 0, false); err != nil {
		return fmt.Errorf("amqpidem: set prefetch: %w", err)
	}
	if err := t.pub.Confirm(false); err != nil {
		return fmt.Errorf("amqpidem: confirm mode for dead letters: %w", err)
	}
	closed := t.ch.NotifyClose(make(chan *amqp.Error, 1))
	deliveries, err := t.ch.Consume(t.queue, t.tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("amqpidem: consume %s: %w", t.queue, err)
	}
	t.deliveries, t.closed, t.runCtx, t.cancel = deliveries, closed, ctx, new(sync.Once)
	t.ended.Store(false)
	return nil
}

// Receive waits for one delivery and takes up to n that are already there.
func (t *transport) Receive(ctx context.Context, n int) ([]amqp.Delivery, error) {
	var d amqp.Delivery
	var ok bool
	select {
	case d, ok = <-t.deliveries:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if !ok {
		return nil, t.closedErr()
	}
	out := append(make([]amqp.Delivery, 0, n), d)
	for len(out) < n {
		select {
		case d, ok = <-t.deliveries:
			if !ok {
				return out, nil // the next Receive reports the close
			}
			out = append(out, d)
		default:
			return out, nil
		}
	}
	return out, nil
}

func (t *transport) closedErr() error {
	t.ended.Store(true)
	select {
	case e, ok := <-t.closed:
		if ok && e != nil {
			return fmt.Errorf("%w: queue %s: %w", ErrDeliveriesClosed, t.queue, e)
		}
	default:
	}
	return fmt.Errorf("%w: queue %s", ErrDeliveriesClosed, t.queue)
}

// Message is MessageOf.
func (t *transport) Message(d amqp.Delivery) idem.Message { return MessageOf(d) }

// Delivery reads the attempt from x-delivery-count, which quorum queues
// set on every delivery (0 on the first) and RabbitMQ raises on every
// requeue and every return by a closed channel. A quorum queue drops the
// message (or dead-letters it through its own x-dead-letter-exchange,
// without idem's headers) once it was returned more than its
// delivery-limit: MaxDeliveries states that limit, and the MaxDeliveries-th
// delivery is the last one handed back to it. A classic queue only flags a
// redelivery (attempt 2, at least) and has no limit: none of its
// redeliveries is the last.
func (t *transport) Delivery(d amqp.Delivery) broker.Delivery {
	attempt, counted := deliveries(d)
	return broker.Delivery{Attempt: attempt,
		Last: t.maxDeliveries > 0 && attempt >= t.maxDeliveries && (counted || !d.Redelivered)}
}

// deliveries is the delivery's attempt number (1 for the first) and
// whether the broker counted it: from x-delivery-count on quorum queues,
// else 2 for any redelivery.
func deliveries(d amqp.Delivery) (attempt int, counted bool) {
	if v, ok := d.Headers["x-delivery-count"]; ok {
		if n, err := strconv.Atoi(HeaderString(v)); err == nil && n >= 0 {
			return n + 1, true
		}
	}
	if d.Redelivered {
		return 2, false
	}
	return 1, false
}

// Ack acknowledges d.
func (t *transport) Ack(_ context.Context, d amqp.Delivery) error { return d.Ack(false) }

// Retry requeues d at the head of the queue; the engine waited out the
// delay (RetryDelays). On shutdown the consumer is cancelled first, so
// the broker hands d to another consumer rather than back to this one.
func (t *transport) Retry(_ context.Context, d amqp.Delivery, _ time.Duration) error {
	if t.cancel != nil && t.runCtx.Err() != nil {
		t.stopConsuming()
	}
	return d.Nack(false, true)
}

// RetryDelays is false: RabbitMQ requeues at once.
func (t *transport) RetryDelays() bool { return false }

// SettlesInPlace reports that Ack and Retry need no settle context of
// their own (broker.InPlace): amqp091's Ack and Nack take none.
func (t *transport) SettlesInPlace() bool { return true }

// Return hands an unstarted (or held) delivery back on shutdown. RabbitMQ
// has no cheaper give-back than a requeue, which counts toward a quorum
// queue's delivery-limit as a crash's return would.
func (t *transport) Return(ctx context.Context, d amqp.Delivery) error {
	return t.Retry(ctx, d, 0)
}

// Drain cancels the AMQP consumer and returns what the broker had sent
// and the engine not yet received (the prefetch), to be requeued.
func (t *transport) Drain(ctx context.Context) []amqp.Delivery {
	t.stopConsuming()
	var out []amqp.Delivery
	for {
		select {
		case d, ok := <-t.deliveries:
			if !ok {
				return out
			}
			out = append(out, d)
		case <-ctx.Done():
			return out // the cancel failed: the rest goes back when the channel closes
		}
	}
}

// stopConsuming cancels the AMQP consumer once; the deliveries channel
// closes after the broker's cancel-ok, with what it had sent before.
func (t *transport) stopConsuming() {
	if t.cancel == nil {
		return // Process without Run
	}
	t.cancel.Do(func() {
		if t.ended.Load() || t.ch.IsClosed() {
			return
		}
		if err := t.ch.Cancel(t.tag, false); err != nil && t.onError != nil {
			t.onError(fmt.Errorf("amqpidem: cancel consumer %s: %w", t.tag, err))
		}
	})
}

// DeadLetter publishes a copy of d with dl's headers and its own, waits
// for the broker's confirm, then acks d.
func (t *transport) DeadLetter(ctx context.Context, d amqp.Delivery, dl broker.DeadLetter) error {
	headers := make(amqp.Table, len(d.Headers)+len(dl.Headers)+8)
	for k, v := range d.Headers {
		headers[k] = v
	}
	for k, v := range dl.Headers {
		headers[k] = v
	}
	headers[HeaderReason] = dl.Reason
	headers[HeaderError] = dl.Headers[idem.HeaderError]
	headers[HeaderQueue] = t.queue
	headers[HeaderExchange] = d.Exchange
	headers[HeaderRoutingKey] = d.RoutingKey
	headers[HeaderAttempt] = int64(dl.Attempt)
	headers[HeaderDeliveryTag] = int64(d.DeliveryTag)
	headers[HeaderConsumerTag] = d.ConsumerTag
	key := t.dlKey
	if key == "" {
		key = d.RoutingKey
	}
	// The original's properties travel with it, except Expiration (a dead
	// letter must wait for an operator) and UserId (checked by the broker
	// against this connection's user).
	msg := amqp.Publishing{
		Headers:         headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	}
	if err := publishConfirmed(ctx, t.pub, t.dlx, key, msg); err != nil {
		return fmt.Errorf("amqpidem: publish dead letter: %w", err)
	}
	if err := d.Ack(false); err != nil {
		// The dead letter is durable; the unacked original comes back and
		// is dead-lettered again (the odd repeat readers of the queue
		// expect).
		return fmt.Errorf("amqpidem: ack the dead-lettered original: %w", err)
	}
	return nil
}
