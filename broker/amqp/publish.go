package amqpidem

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemgo/idem"
	amqp "github.com/rabbitmq/amqp091-go"
)

// PublishOption configures Publish.
type PublishOption func(*publishConfig)

type publishConfig struct {
	msg         *amqp.Publishing
	fingerprint idem.FingerprintFunc
}

// HeaderDedup is the header of the rabbitmq-message-deduplication plugin
// (exchanges of type x-message-deduplication, queues with
// x-message-deduplication): the broker drops a message whose value it has
// seen within its cache's TTL. Publish sets it to idem.DedupID(id,
// fingerprint), so that the plugin, where it is enabled, collapses retries
// of the same content but never drops an id reused with other content.
// Without the plugin RabbitMQ ignores it.
const HeaderDedup = "x-deduplication-header"

// WithFingerprint sets how Publish fingerprints the message for its dedup
// id (HeaderDedup): give it the consumers' idem.Options.Fingerprint when it
// is not the default idem.PayloadFingerprint. It sees the message as a
// consumer's guard does (MessageOf). A fingerprint coarser than the
// consumers' would let the broker's deduplication drop content they tell
// apart; a finer one only lets more retries through for them to skip.
func WithFingerprint(f idem.FingerprintFunc) PublishOption {
	return func(c *publishConfig) { c.fingerprint = f }
}

// WithCloudEvent adds the CloudEvents AMQP binding's headers
// (cloudEvents:specversion 1.0, cloudEvents:id = the message id,
// cloudEvents:source, cloudEvents:type), so consumers keyed with
// idem.CloudEventsKey find the event's identity.
func WithCloudEvent(source, eventType string) PublishOption {
	return func(c *publishConfig) {
		p := c.msg
		p.Headers["cloudEvents:specversion"] = "1.0"
		p.Headers["cloudEvents:id"] = p.MessageId
		p.Headers["cloudEvents:source"] = source
		p.Headers["cloudEvents:type"] = eventType
	}
}

// WithHeader sets a header on the published message.
func WithHeader(key string, value any) PublishOption {
	return func(c *publishConfig) { c.msg.Headers[key] = value }
}

// Publish publishes msg to exchange with routingKey, its MessageId set to the
// stable id id, its Timestamp to now unless msg has one (dead letters keep
// it, so an operator sees when the message was sent), HeaderDedup set to
// idem.DedupID(id, fingerprint) (idem.PayloadFingerprint of the body, or
// WithFingerprint), and persistent delivery unless msg says otherwise. When
// ch is in confirm mode it waits for the broker's confirm and reports a
// nack as an error.
//
// RabbitMQ has no broker-side duplicate detection of its own: a retry of
// this call after a lost confirm enqueues the message again. Reuse the same
// id when retrying, so the consumer's guard recognises the repeat. An empty
// id is an error wrapping idem.ErrNoKey.
func Publish(ctx context.Context, ch *amqp.Channel, exchange, routingKey, id string, msg amqp.Publishing, opts ...PublishOption) error {
	if strings.TrimSpace(id) == "" {
		return fmt.Errorf("amqpidem: publish to %q/%q: %w", exchange, routingKey, idem.ErrNoKey)
	}
	msg.MessageId = id
	if msg.DeliveryMode == 0 {
		msg.DeliveryMode = amqp.Persistent
	}
	if msg.Timestamp.IsZero() {
		msg.Timestamp = time.Now()
	}
	h := make(amqp.Table, len(msg.Headers)+5)
	for k, v := range msg.Headers {
		h[k] = v
	}
	msg.Headers = h
	cfg := publishConfig{msg: &msg, fingerprint: idem.PayloadFingerprint}
	for _, o := range opts {
		o(&cfg)
	}
	fp, err := cfg.fingerprint(MessageOf(amqp.Delivery{Headers: h, Body: msg.Body, ContentType: msg.ContentType, MessageId: id}))
	if err != nil {
		return fmt.Errorf("amqpidem: publish to %q/%q: fingerprint: %w", exchange, routingKey, err)
	}
	h[HeaderDedup] = idem.DedupID(id, fp)
	if err := publishConfirmed(ctx, ch, exchange, routingKey, msg); err != nil {
		return fmt.Errorf("amqpidem: publish to %q/%q: %w", exchange, routingKey, err)
	}
	return nil
}

// publishConfirmed publishes msg and, when ch is in confirm mode, waits for
// the broker's confirm, reporting a nack as an error.
func publishConfirmed(ctx context.Context, ch *amqp.Channel, exchange, key string, msg amqp.Publishing) error {
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, msg)
	if err != nil {
		return err
	}
	if dc == nil {
		return nil // not in confirm mode
	}
	ok, err := dc.WaitContext(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("confirm: %w", err)
	case !ok:
		return errors.New("nacked by the broker")
	}
	return nil
}
