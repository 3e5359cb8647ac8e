package watermillidem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idemgo/idem"
)

// PublishOption configures Publish.
type PublishOption func(*publishConfig)

type publishConfig struct {
	fingerprint idem.FingerprintFunc
}

// WithFingerprint sets how Publish fingerprints the message for its UUID:
// give it the consumers' idem.Options.Fingerprint when it is not the
// default idem.PayloadFingerprint. It sees the message as a consumer's
// guard does (MessageOf). A fingerprint coarser than the consumers' would
// let a Pub/Sub that deduplicates by UUID drop content they tell apart.
func WithFingerprint(f idem.FingerprintFunc) PublishOption {
	return func(c *publishConfig) { c.fingerprint = f }
}

// Publish publishes a copy of msg (its payload and metadata; msg itself is
// not changed) through pub to topic with the stable message id id. The id
// travels in the Idem-Id metadata field (HeaderID), which MessageOf reads
// as the key; the UUID, which the Pub/Subs that deduplicate read
// (watermill-nats with JetStreamConfig.TrackMsgId sends it as JetStream's
// Nats-Msg-Id; Watermill's Deduplicator middleware keys on it), is derived from idem.DedupID(id, fingerprint),
// the id with a digest of the content, in the UUID form (version 8) that
// every Pub/Sub stores. Reuse the same id when retrying a publish: a
// retry of the same content gets the same UUID and may be dropped by such
// a Pub/Sub; an id reused with other content gets another UUID, so it is
// never dropped unseen: it reaches the consumer, whose guard dead-letters
// it as a conflict. Where the Pub/Sub deduplicates nothing, the consumer's
// guard recognises the retry. ctx becomes the copy's context, which some
// publishers read. An empty id is an error wrapping idem.ErrNoKey.
func Publish(ctx context.Context, pub message.Publisher, topic, id string, msg *message.Message, opts ...PublishOption) error {
	if strings.TrimSpace(id) == "" {
		return fmt.Errorf("watermillidem: publish to %s: %w", topic, idem.ErrNoKey)
	}
	cfg := publishConfig{fingerprint: idem.PayloadFingerprint}
	for _, o := range opts {
		o(&cfg)
	}
	out := message.NewMessage("", msg.Payload)
	for k, v := range msg.Metadata {
		out.Metadata[k] = v
	}
	out.Metadata[HeaderID] = id
	fp, err := cfg.fingerprint(MessageOf(out))
	if err != nil {
		return fmt.Errorf("watermillidem: publish to %s: fingerprint: %w", topic, err)
	}
	out.UUID = dedupUUID(idem.DedupID(id, fp))
	out.SetContext(ctx)
	if err := pub.Publish(topic, out); err != nil {
		return fmt.Errorf("watermillidem: publish to %s: %w", topic, err)
	}
	return nil
}

// dedupUUID is a UUID (RFC 9562 version 8: its bits are a digest of
// dedup) that stands for the dedup id dedup where a Pub/Sub takes UUIDs
// only (watermill-sql stores 36 characters).
func dedupUUID(dedup string) string {
	sum := sha256.Sum256([]byte(dedup))
	b := sum[:16]
	b[6] = b[6]&0x0f | 0x80 // version 8
	b[8] = b[8]&0x3f | 0x80 // the RFC 9562 variant
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
