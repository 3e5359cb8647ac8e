package servicebus

import (
	"context"
	"fmt"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/amqpprop"
)

// SendOption configures Send.
type SendOption func(*sendConfig)

type sendConfig struct {
	fingerprint idem.FingerprintFunc
}

// WithFingerprint sets how Send fingerprints the message for its
// MessageID: give it the consumers' idem.Options.Fingerprint when it is not
// the default idem.PayloadFingerprint. It sees the message as a consumer's
// guard does (MessageOf). A fingerprint coarser than the consumers' would
// let duplicate detection drop content they tell apart.
func WithFingerprint(f idem.FingerprintFunc) SendOption {
	return func(c *sendConfig) { c.fingerprint = f }
}

// Send sends msg to s with the stable message id id. The id travels in the
// Idem-Id application property (HeaderID), which MessageOf reads; MessageID,
// which the entity's duplicate detection reads, is idem.DedupID(id,
// fingerprint): the id with a digest of the content. Reuse the same id when
// retrying a send: inside the entity's duplicate detection window Service
// Bus drops a repeat of the same content; after it, the consumer's guard
// recognises the id. An id reused with other content gets another
// MessageID, so Service Bus never drops it unseen: it reaches the consumer,
// whose guard dead-letters it as a conflict. Duplicate detection is a
// complement to consumer-side deduplication, never a replacement: its
// window is bounded, and it knows nothing of what a consumer did.
//
// msg's MessageID must be unset or id itself. An empty id is an error
// wrapping idem.ErrNoKey.
func Send(ctx context.Context, s *azservicebus.Sender, id string, msg *azservicebus.Message, opts ...SendOption) error {
	if strings.TrimSpace(id) == "" {
		return fmt.Errorf("servicebus: send: %w", idem.ErrNoKey)
	}
	if msg.MessageID != nil && *msg.MessageID != id {
		return fmt.Errorf("%w: servicebus: send: MessageID %q is not the id %q", idem.ErrInvalidOptions, *msg.MessageID, id)
	}
	cfg := sendConfig{fingerprint: idem.PayloadFingerprint}
	for _, o := range opts {
		o(&cfg)
	}
	out := *msg
	out.ApplicationProperties = make(map[string]any, len(msg.ApplicationProperties)+1)
	for k, v := range msg.ApplicationProperties {
		out.ApplicationProperties[k] = v
	}
	out.ApplicationProperties[HeaderID] = id
	im := idem.Message{ID: id, Payload: out.Body, Headers: map[string]string{}}
	for k, v := range out.ApplicationProperties {
		im.Headers[k] = amqpprop.Text(v)
	}
	if out.ContentType != nil {
		im.ContentType = *out.ContentType
	}
	fp, err := cfg.fingerprint(im)
	if err != nil {
		return fmt.Errorf("servicebus: send: fingerprint: %w", err)
	}
	dedup := idem.DedupID(id, fp)
	out.MessageID = &dedup
	return s.SendMessage(ctx, &out, nil)
}
