package natsidem

import (
	"context"
	"fmt"
	"strings"

	"github.com/idemgo/idem"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PublishOption configures Publish.
type PublishOption func(*publishConfig)

type publishConfig struct {
	headers     nats.Header
	source, typ string
	cloudEvent  bool
	jsOpts      []jetstream.PublishOpt
}

// WithCloudEvent adds CloudEvents binary-mode headers (ce-specversion 1.0,
// ce-id = the message id, ce-source, ce-type), so consumers keyed with
// idem.CloudEventsKey find the event's identity.
func WithCloudEvent(source, eventType string) PublishOption {
	return func(c *publishConfig) { c.cloudEvent, c.source, c.typ = true, source, eventType }
}

// WithHeader sets a header on the published message.
func WithHeader(key, value string) PublishOption {
	return func(c *publishConfig) { c.headers.Set(key, value) }
}

// WithContentType sets the Content-Type header (the CloudEvents
// datacontenttype in binary mode).
func WithContentType(contentType string) PublishOption {
	return WithHeader("Content-Type", contentType)
}

// WithPublishOpts passes JetStream publish options through (for example
// jetstream.WithExpectStream).
func WithPublishOpts(opts ...jetstream.PublishOpt) PublishOption {
	return func(c *publishConfig) { c.jsOpts = append(c.jsOpts, opts...) }
}

// Publish publishes data to subject with the stable message id id in the
// Nats-Msg-Id header and waits for the stream's ack. Reuse the same id when
// retrying a publish: inside the stream's duplicate window the server drops
// the repeat and returns an ack with Duplicate set; after it, the consumer's
// guard recognises the id. The window is a complement to consumer-side
// deduplication, never a replacement (see the package doc).
//
// An empty id is an error wrapping idem.ErrNoKey: a message without an id
// cannot be deduplicated anywhere.
func Publish(ctx context.Context, js jetstream.JetStream, subject, id string, data []byte, opts ...PublishOption) (*jetstream.PubAck, error) {
	if strings.TrimSpace(id) == "" {
		return nil, fmt.Errorf("natsidem: publish to %s: %w", subject, idem.ErrNoKey)
	}
	cfg := publishConfig{headers: nats.Header{}}
	for _, o := range opts {
		o(&cfg)
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	for k, v := range cfg.headers {
		msg.Header[k] = v
	}
	msg.Header.Set(jetstream.MsgIDHeader, id)
	if cfg.cloudEvent {
		msg.Header.Set("ce-specversion", "1.0")
		msg.Header.Set("ce-id", id)
		msg.Header.Set("ce-source", cfg.source)
		msg.Header.Set("ce-type", cfg.typ)
	}
	ack, err := js.PublishMsg(ctx, msg, cfg.jsOpts...)
	if err != nil {
		return nil, fmt.Errorf("natsidem: publish to %s: %w", subject, err)
	}
	return ack, nil
}
