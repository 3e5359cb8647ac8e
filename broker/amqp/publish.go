package amqpidem

import (
	"context"
	"fmt"
	"strings"

	"github.com/idemgo/idem"
	amqp "github.com/rabbitmq/amqp091-go"
)

// PublishOption configures Publish.
type PublishOption func(*amqp.Publishing)

// WithCloudEvent adds the CloudEvents AMQP binding's headers
// (cloudEvents:specversion 1.0, cloudEvents:id = the message id,
// cloudEvents:source, cloudEvents:type), so consumers keyed with
// idem.CloudEventsKey find the event's identity.
func WithCloudEvent(source, eventType string) PublishOption {
	return func(p *amqp.Publishing) {
		p.Headers["cloudEvents:specversion"] = "1.0"
		p.Headers["cloudEvents:id"] = p.MessageId
		p.Headers["cloudEvents:source"] = source
		p.Headers["cloudEvents:type"] = eventType
	}
}

// WithHeader sets a header on the published message.
func WithHeader(key string, value any) PublishOption {
	return func(p *amqp.Publishing) { p.Headers[key] = value }
}

// Publish publishes msg to exchange with routingKey, its MessageId set to the
// stable id id, and persistent delivery unless msg says otherwise. When ch
// is in confirm mode it waits for the broker's confirm and reports a nack as
// an error.
//
// RabbitMQ has no broker-side duplicate detection: a retry of this call
// after a lost confirm enqueues the message again. Reuse the same id when
// retrying, so the consumer's guard recognises the repeat. An empty id is an
// error wrapping idem.ErrNoKey.
func Publish(ctx context.Context, ch *amqp.Channel, exchange, routingKey, id string, msg amqp.Publishing, opts ...PublishOption) error {
	if strings.TrimSpace(id) == "" {
		return fmt.Errorf("amqpidem: publish to %q/%q: %w", exchange, routingKey, idem.ErrNoKey)
	}
	msg.MessageId = id
	if msg.DeliveryMode == 0 {
		msg.DeliveryMode = amqp.Persistent
	}
	h := make(amqp.Table, len(msg.Headers)+4)
	for k, v := range msg.Headers {
		h[k] = v
	}
	msg.Headers = h
	for _, o := range opts {
		o(&msg)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, routingKey, false, false, msg)
	if err != nil {
		return fmt.Errorf("amqpidem: publish to %q/%q: %w", exchange, routingKey, err)
	}
	if dc == nil {
		return nil
	}
	ok, err := dc.WaitContext(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("amqpidem: publish to %q/%q: confirm: %w", exchange, routingKey, err)
	case !ok:
		return fmt.Errorf("amqpidem: publish to %q/%q: nacked by the broker", exchange, routingKey)
	}
	return nil
}
