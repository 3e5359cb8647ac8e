package amqpidem

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/internal/consume"
)

// Dead-letter headers set by the consumer, beside idem's own
// (idem.HeaderReason, idem.HeaderError, idem.HeaderDeadLetterKey,
// idem.HeaderFingerprint and the idem.HeaderStored* headers from
// idem.DeadLetterHeaders: the reason, the error, the key, this message's
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

// ackTimeout bounds a dead-letter publish and its confirm when the
// handler's context has ended (shutdown).
const ackTimeout = 10 * time.Second

// pending is a delivery on its way to its broker action.
type pending = consume.Pending[amqp.Delivery]

// pending starts the way of d: its guard view and its attempt.
func (c *Consumer) pending(d amqp.Delivery) *pending {
	attempt := deliveries(d)
	return &pending{Msg: d, Message: MessageOf(d), Attempt: attempt,
		Last: c.opts.MaxDeliveries > 0 && attempt >= c.opts.MaxDeliveries}
}

// Process handles one delivery and takes its broker action, with the hooks
// of Options.Hooks; Run calls it for every delivery. It is exported for
// programs that run their own consume loop: call it once per delivery of a
// channel with manual acks, and put the dead-letter channel in confirm mode
// (Confirm(false)) first so a dead letter is confirmed before the original
// is acked. A retried delivery is held for its back-off (or until ctx ends)
// before the Nack, and a delivery whose key is in progress elsewhere is
// held while its key is claimed again (see Options.MaxHold), so Process
// blocks that long.
func (c *Consumer) Process(ctx context.Context, d amqp.Delivery) broker.Report {
	p := c.pending(d)
	c.drv.Drive(ctx, ctx.Done(), p)
	var out broker.Report
	c.act(ctx, p, func(delay time.Duration, then func()) {
		consume.Sleep(delay, ctx.Done())
		then()
	}, func(r broker.Report) { out = r })
	return out
}

// act takes the broker action for p's latest outcome, with the hooks around
// it, and calls done with its report. A retry's requeue is left to hold,
// which runs then after the back-off (Run holds in a separate goroutine,
// Process inline).
func (c *Consumer) act(ctx context.Context, p *pending, hold func(delay time.Duration, then func()), done func(broker.Report)) {
	d := p.Msg
	r := c.drv.Decide(p)
	if r.Action == idem.ActionRetry && errors.Is(p.Err, idem.ErrInProgress) && p.WasHeld() {
		// Held until MaxHold or the shutdown, claimed again meanwhile: it
		// waited already, and goes back at once. Never held (MaxHold
		// negative), it waits for the holder's lease before the requeue.
		r.Delay = 0
	}
	hooks := c.opts.Hooks
	hooks.CallBeforeSettle(ctx, d, r)
	settled := func(r broker.Report) {
		hooks.CallAfterSettle(ctx, d, r)
		done(r)
	}
	switch r.Action {
	case idem.ActionAck:
		r.BrokerErr = d.Ack(false)
	case idem.ActionRetry:
		hold(r.Delay, func() {
			r.BrokerErr = d.Nack(false, true)
			settled(r)
		})
		return
	case idem.ActionDeadLetter:
		h := consume.DeadLetterHeaders(c.g, p.Message, p.Result, p.Err, r.Reason)
		r.Reason = h[idem.HeaderReason]
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
		perr := c.deadLetter(actx, p, h)
		cancel()
		if perr != nil {
			// Not acked: requeued after a back-off, and dead-lettered again
			// once the destination accepts it.
			c.reportErr(perr)
			r.Delay = c.opts.Backoff(p.Attempt)
			hold(r.Delay, func() {
				r.BrokerErr = perr
				if nerr := d.Nack(false, true); nerr != nil {
					r.BrokerErr = fmt.Errorf("%w; nack: %w", perr, nerr)
				}
				settled(r)
			})
			return
		}
		hooks.CallOnDeadLetter(ctx, d, r)
		r.BrokerErr = d.Ack(false)
	}
	settled(r)
}

// deadLetter publishes a copy of p's delivery, with the idem headers h and
// its own, and waits for the broker's confirm.
func (c *Consumer) deadLetter(ctx context.Context, p *pending, h map[string]string) error {
	d := p.Msg
	headers := make(amqp.Table, len(d.Headers)+len(h)+6)
	for k, v := range d.Headers {
		headers[k] = v
	}
	for k, v := range h {
		headers[k] = v
	}
	headers[HeaderReason] = h[idem.HeaderReason]
	headers[HeaderError] = h[idem.HeaderError]
	headers[HeaderQueue] = c.opts.Queue
	headers[HeaderExchange] = d.Exchange
	headers[HeaderRoutingKey] = d.RoutingKey
	headers[HeaderAttempt] = int64(p.Attempt)
	headers[HeaderDeliveryTag] = int64(d.DeliveryTag)
	headers[HeaderConsumerTag] = d.ConsumerTag
	key := c.opts.DeadLetterRoutingKey
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
	if err := publishConfirmed(ctx, c.pub, c.opts.DeadLetterExchange, key, msg); err != nil {
		return fmt.Errorf("amqpidem: publish dead letter: %w", err)
	}
	return nil
}
