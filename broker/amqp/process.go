package amqpidem

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/consume"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Dead-letter headers.
const (
	HeaderReason     = "x-idem-reason"      // conflict, no_key, invalid_key, parked, permanent, max_deliver
	HeaderError      = "x-idem-error"       // the error text (at most 1 KiB)
	HeaderQueue      = "x-idem-queue"       // the queue the message was consumed from
	HeaderExchange   = "x-idem-exchange"    // the exchange it was published to
	HeaderRoutingKey = "x-idem-routing-key" // its routing key
)

// ackTimeout bounds a dead-letter publish and its confirm when the
// handler's context has ended (shutdown).
const ackTimeout = 10 * time.Second

// Process handles one delivery and takes its broker action; Run calls it
// for every delivery. It is exported for programs that run their own
// consume loop: call it once per delivery of a channel with manual acks,
// and put the dead-letter channel in confirm mode (Confirm(false)) first so
// a dead letter is confirmed before the original is acked.
// A retried delivery is held for its back-off (or until ctx ends) before
// the Nack, so Process blocks that long.
func (c *Consumer) Process(ctx context.Context, d amqp.Delivery) Report {
	var out Report
	c.process(ctx, d, func(delay time.Duration, then func()) {
		wait(delay, ctx.Done())
		then()
	}, func(_ amqp.Delivery, r Report) { out = r })
	return out
}

// process handles d and calls done with its report once the action is
// taken. A retry's requeue is left to hold, which runs then after the
// back-off (Run holds in a separate goroutine, Process inline).
func (c *Consumer) process(ctx context.Context, d amqp.Delivery, hold func(delay time.Duration, then func()), done func(amqp.Delivery, Report)) {
	res, err := consume.Run(ctx, c.h, c.g, c.opts.Message(d), d)
	r := Report{Result: res, Err: err, Action: idem.Decide(res, err)}
	if r.Action == idem.ActionRetry && c.opts.MaxDeliveries > 0 && deliveries(d) >= c.opts.MaxDeliveries {
		r.Action, r.Reason = idem.ActionDeadLetter, ReasonMaxDeliver
	}
	switch r.Action {
	case idem.ActionAck:
		r.BrokerErr = d.Ack(false)
	case idem.ActionRetry:
		r.Delay = c.opts.Backoff(deliveries(d))
		hold(r.Delay, func() {
			r.BrokerErr = d.Nack(false, true)
			done(d, r)
		})
		return
	case idem.ActionDeadLetter:
		if r.Reason == "" {
			r.Reason = idem.DeadLetterReason(err)
		}
		if r.Reason == "" {
			r.Reason = "permanent"
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
		perr := c.deadLetter(actx, d, r.Reason, err)
		cancel()
		if perr != nil {
			// Not acked: requeued after a back-off, and dead-lettered again
			// once the destination accepts it.
			r.Delay = c.opts.Backoff(deliveries(d))
			hold(r.Delay, func() {
				r.BrokerErr = perr
				if nerr := d.Nack(false, true); nerr != nil {
					r.BrokerErr = fmt.Errorf("%w; nack: %w", perr, nerr)
				}
				done(d, r)
			})
			return
		}
		r.BrokerErr = d.Ack(false)
	}
	done(d, r)
}

// wait waits for d or until stop is closed.
func wait(d time.Duration, stop <-chan struct{}) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-stop:
	}
}

// deadLetter publishes a copy of d, with the reason in its headers, and
// waits for the broker's confirm.
func (c *Consumer) deadLetter(ctx context.Context, d amqp.Delivery, reason string, cause error) error {
	headers := make(amqp.Table, len(d.Headers)+5)
	for k, v := range d.Headers {
		headers[k] = v
	}
	errText := ""
	if cause != nil {
		errText = cause.Error()
	}
	headers[HeaderReason] = reason
	headers[HeaderError] = headerValue(errText)
	headers[HeaderQueue] = c.opts.Queue
	headers[HeaderExchange] = d.Exchange
	headers[HeaderRoutingKey] = d.RoutingKey
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
	dc, err := c.pub.PublishWithDeferredConfirmWithContext(ctx, c.opts.DeadLetterExchange, key, false, false, msg)
	if err != nil {
		return fmt.Errorf("amqpidem: publish dead letter: %w", err)
	}
	if dc == nil {
		return nil // the channel is not in confirm mode (Process outside Run)
	}
	ok, err := dc.WaitContext(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("amqpidem: dead letter confirm: %w", err)
	case !ok:
		return fmt.Errorf("amqpidem: dead letter nacked by the broker")
	}
	return nil
}
