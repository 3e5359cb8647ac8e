package pubsubidem

import (
	"context"
	"fmt"
	"strings"

	"cloud.google.com/go/pubsub/v2"

	"github.com/idemgo/idem/broker"
)

// Replay publishes dl, a dead letter received from the dead-letter topic
// (one a Consumer wrote, or one Pub/Sub forwarded itself under the
// subscription's dead-letter policy), to p, a publisher on the topic it
// came from: its data and attributes as they were, without idem's
// dead-letter attributes, its position (Idem-Subscription,
// Idem-Original-Position, Idem-Publish-Time, Idem-Delivery-Attempt) and the
// CloudPubSubDeadLetterSource* attributes Pub/Sub adds when it forwards
// one; its ordering key is restored when p has EnableMessageOrdering. It
// returns once Pub/Sub stored it; ack dl afterwards.
//
// The Idem-Id attribute stays, so the consumer's record decides as for
// any redelivery: a key completed meanwhile is a duplicate, acked without
// running the handler; a key never completed is processed; content that
// conflicts with the recorded key is dead-lettered again. Keep the
// guard's Retention longer than a dead letter may wait to be replayed.
func Replay(ctx context.Context, p *pubsub.Publisher, dl *pubsub.Message) error {
	out := &pubsub.Message{Data: dl.Data, Attributes: make(map[string]string, len(dl.Attributes))}
	for k, v := range dl.Attributes {
		switch {
		case broker.IsDeadLetterHeader(k), k == HeaderSubscription, k == HeaderPosition, k == HeaderPublishTime,
			k == HeaderDeliveryAttempt, k == HeaderOrderingKey, strings.HasPrefix(k, "CloudPubSubDeadLetterSource"):
		default:
			out.Attributes[k] = v
		}
	}
	if p.EnableMessageOrdering {
		out.OrderingKey = dl.Attributes[HeaderOrderingKey]
	}
	if _, err := p.Publish(ctx, out).Get(ctx); err != nil {
		return fmt.Errorf("pubsubidem: replay %s to %s: %w", dl.ID, p, err)
	}
	return nil
}
