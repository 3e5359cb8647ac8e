package amqpidem

import (
	"context"
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// ErrNotDeadLetter means Replay was given a delivery that is not a dead
// letter of this package: it has no x-idem-routing-key header.
var ErrNotDeadLetter = errors.New("amqpidem: not a dead letter (no " + HeaderRoutingKey + " header)")

// Replay re-publishes dl, a dead letter a Consumer wrote (taken from the
// dead-letter queue), to the exchange and routing key the original was
// published to (its x-idem-exchange and x-idem-routing-key headers), with
// its body and the original's properties as they were (message-id,
// correlation-id, timestamp, content type, ...; persistent) and the
// original's headers, without the headers idem put on it when
// dead-lettering it (idem.DeadLetterHeaders and every x-idem-* header) and
// without x-delivery-count, which the queue counts anew for the replayed
// message. When ch is in confirm mode Replay waits for the broker's
// confirm and reports a nack as an error. dl itself is not acknowledged:
// ack it once Replay returned nil.
//
// The replay's x-deduplication-header (HeaderDedup, when the original had
// one) is one of its own, idem.ReplayDedupID of the original's: the
// original's, "~replay-" and a random nonce. The rabbitmq-message-
// deduplication plugin remembers the original's for its cache time and
// would drop a replay that carried it, silently; the consumer deduplicates
// by the key (the message-id, which the replay keeps), and MessageOf reads
// a replay's HeaderDedup as the original's, so the guard sees the replay
// as it saw the original. Each call is a replay of its own: replaying dl
// twice publishes it twice, and the consumer's record makes the second a
// duplicate.
//
// The consumer's record then decides, as for any redelivery: a key that
// was completed meanwhile (a producer re-send processed after the dead
// letter, or an operator's fix) is a duplicate, acknowledged without
// running the handler; a key never completed is processed; content that
// conflicts with the recorded key is dead-lettered again. For that the
// record must outlive the replay: keep the guard's Retention longer than
// the longest time a dead letter may wait before it is replayed.
//
// Through the original exchange the replay reaches every queue bound to
// it, as the original did: each of their consumers' records decides, so
// those that processed it ack it as a duplicate. RabbitMQ drops a replay
// that no queue is bound for; publish with the mandatory flag yourself
// (to the default exchange with x-idem-queue as the routing key) to reach
// only the queue that dead-lettered it.
func Replay(ctx context.Context, ch *amqp.Channel, dl amqp.Delivery) error {
	exchange, key, msg, err := replayed(dl)
	if err != nil {
		return err
	}
	if err := publishConfirmed(ctx, ch, exchange, key, msg); err != nil {
		return fmt.Errorf("amqpidem: replay to %q/%q: %w", exchange, key, err)
	}
	return nil
}

// replayed is where the original of a dead letter was published, and the
// original message.
func replayed(dl amqp.Delivery) (exchange, key string, msg amqp.Publishing, err error) {
	k, ok := dl.Headers[HeaderRoutingKey]
	if !ok {
		return "", "", msg, ErrNotDeadLetter
	}
	headers := make(amqp.Table, len(dl.Headers))
	for name, v := range dl.Headers {
		if broker.IsDeadLetterHeader(name) || strings.HasPrefix(strings.ToLower(name), "x-idem-") || name == "x-delivery-count" {
			continue
		}
		headers[name] = v
	}
	if v, ok := headers[HeaderDedup]; ok {
		// The deduplication plugin remembers the original's for its cache
		// time and would drop the replay: it gets one of its own, which
		// MessageOf reads back as the original's.
		headers[HeaderDedup] = idem.ReplayDedupID(HeaderString(v))
	}
	msg = amqp.Publishing{
		Headers:         headers,
		ContentType:     dl.ContentType,
		ContentEncoding: dl.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		Priority:        dl.Priority,
		CorrelationId:   dl.CorrelationId,
		ReplyTo:         dl.ReplyTo,
		MessageId:       dl.MessageId,
		Timestamp:       dl.Timestamp,
		Type:            dl.Type,
		AppId:           dl.AppId,
		Body:            dl.Body,
	}
	return HeaderString(dl.Headers[HeaderExchange]), HeaderString(k), msg, nil
}
