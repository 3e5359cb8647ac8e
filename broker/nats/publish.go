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
	fingerprint idem.FingerprintFunc
	jsOpts      []jetstream.PublishOpt
}

// WithFingerprint sets how Publish fingerprints the message for its dedup
// id: give it the consumers' idem.Options.Fingerprint when it is not the
// default idem.PayloadFingerprint. It sees the message as a consumer's
// guard does (MessageOf: the id, headers and data). A fingerprint coarser
// than the consumers' would let the duplicate window drop content they
// tell apart; a finer one only stores more retries for them to skip.
func WithFingerprint(f idem.FingerprintFunc) PublishOption {
	return func(c *publishConfig) { c.fingerprint = f }
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

// Publish publishes data to subject with the stable message id id and waits
// for the stream's ack. The id travels in the Idem-Id header (HeaderID),
// which MessageOf reads; Nats-Msg-Id, which JetStream's duplicate window
// reads, is idem.DedupID(id, fingerprint): the id with a digest of the
// content (idem.PayloadFingerprint of data, or WithFingerprint). Reuse the
// same id when retrying a publish: inside the window the server drops a
// repeat of the same content and returns an ack with Duplicate set; after
// it, the consumer's guard recognises the id. An id reused with other
// content is never dropped by the server: it reaches the consumer, whose
// guard dead-letters it as a conflict. The window is a complement to
// consumer-side deduplication, never a replacement (see the package doc).
//
// An empty id is an error wrapping idem.ErrNoKey: a message without an id
// cannot be deduplicated anywhere.
func Publish(ctx context.Context, js jetstream.JetStream, subject, id string, data []byte, opts ...PublishOption) (*jetstream.PubAck, error) {
	if strings.TrimSpace(id) == "" {
		return nil, fmt.Errorf("natsidem: publish to %s: %w", subject, idem.ErrNoKey)
	}
	cfg := publishConfig{headers: nats.Header{}, fingerprint: idem.PayloadFingerprint}
	for _, o := range opts {
		o(&cfg)
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	for k, v := range cfg.headers {
		msg.Header[k] = v
	}
	msg.Header.Set(HeaderID, id)
	if cfg.cloudEvent {
		msg.Header.Set("ce-specversion", "1.0")
		msg.Header.Set("ce-id", id)
		msg.Header.Set("ce-source", cfg.source)
		msg.Header.Set("ce-type", cfg.typ)
	}
	msg.Header.Set(jetstream.MsgIDHeader, id)
	fp, err := cfg.fingerprint(messageOf(msg.Header, msg.Data))
	if err != nil {
		return nil, fmt.Errorf("natsidem: publish to %s: fingerprint: %w", subject, err)
	}
	msg.Header.Set(jetstream.MsgIDHeader, idem.DedupID(id, fp))
	ack, err := js.PublishMsg(ctx, msg, cfg.jsOpts...)
	if err != nil {
		return nil, fmt.Errorf("natsidem: publish to %s: %w", subject, err)
	}
	return ack, nil
}
