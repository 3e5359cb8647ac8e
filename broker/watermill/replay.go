package watermillidem

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idemgo/idem/broker"
)

// Replay publishes dl, a dead letter a Middleware wrote (received from its
// PoisonTopic), through pub to the topic its handler consumed (its
// Idem-Original-Topic metadata field), with its payload and the original's
// metadata, without the fields idem put on it when dead-lettering it
// (idem.DeadLetterHeaders, Idem-Original-Topic, Idem-Handler and
// Watermill's *_poisoned fields). It returns once pub has published it;
// ack dl afterwards. A message without Idem-Original-Topic is refused with
// an error wrapping ErrNotDeadLetter.
//
// The replay's UUID is one of its own (watermill.NewUUID) and its key
// travels in the Idem-Id metadata field: the original's id as MessageOf
// read it (its Idem-Id, else its UUID). A Pub/Sub that deduplicates by
// UUID (watermill-nats with JetStreamConfig.TrackMsgId, in JetStream's
// duplicate window; Watermill's Deduplicator middleware) remembers the original's and would drop a
// replay that carried it, silently; the consumer deduplicates by the key,
// so the guard sees the replay as it saw the original: same id, same key.
// Each call is a replay of its own: replaying dl twice publishes it twice,
// and the consumer's record makes the second a duplicate.
//
// The consumer's record then decides, as for any redelivery: a key
// completed meanwhile is a duplicate, acked without running the handler; a
// key never completed is processed; content that conflicts with the
// recorded key is dead-lettered again. Keep the guard's Retention longer
// than a dead letter may wait before it is replayed.
func Replay(ctx context.Context, pub message.Publisher, dl *message.Message) error {
	topic := dl.Metadata[HeaderTopic]
	if topic == "" {
		return fmt.Errorf("watermillidem: replay %s: %w", dl.UUID, ErrNotDeadLetter)
	}
	out := message.NewMessage(watermill.NewUUID(), dl.Payload)
	for k, v := range dl.Metadata {
		switch k {
		case HeaderTopic, HeaderHandler, ReasonPoisoned, TopicPoisoned, HandlerPoisoned, SubscriberPoison:
		default:
			if !broker.IsDeadLetterHeader(k) {
				out.Metadata[k] = v
			}
		}
	}
	out.Metadata[HeaderID] = MessageOf(dl).ID
	out.SetContext(ctx)
	if err := pub.Publish(topic, out); err != nil {
		return fmt.Errorf("watermillidem: replay %s to %s: %w", dl.UUID, topic, err)
	}
	return nil
}
