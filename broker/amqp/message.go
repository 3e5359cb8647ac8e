package amqpidem

import (
	"fmt"
	"strconv"
	"time"

	"github.com/idemgo/idem"
	amqp "github.com/rabbitmq/amqp091-go"
)

// MessageOf builds the idem.Message the guard sees: ID from the message-id
// property, Headers from the AMQP headers rendered as text (see
// HeaderString), Payload from the body, ContentType from the content-type
// property and CorrelationID from the correlation-id property (which ties
// the message to a flow in the observer's events and logs; it is never a
// key). The delivery tag, the redelivered flag and x-delivery-count are
// deliberately left out: they change on redelivery. A replay's
// x-deduplication-header (HeaderDedup: the original's, "~replay-" and a
// nonce, see Replay) reads as the original's, so the guard sees a replay
// as it saw the original.
func MessageOf(d amqp.Delivery) idem.Message {
	im := idem.Message{ID: d.MessageId, Payload: d.Body, ContentType: d.ContentType, CorrelationID: d.CorrelationId}
	if len(d.Headers) > 0 {
		im.Headers = make(map[string]string, len(d.Headers))
		for k, v := range d.Headers {
			im.Headers[k] = HeaderString(v)
		}
		if orig, ok := idem.OriginalDedupID(im.Headers[HeaderDedup]); ok {
			im.Headers[HeaderDedup] = orig
		}
	}
	return im
}

// HeaderString renders an AMQP table value as text: strings and byte slices
// as they are, numbers and booleans in their usual decimal form, times as
// RFC 3339 in UTC, nil as "", anything else (nested tables, arrays,
// decimals) with fmt.
func HeaderString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	case bool:
		return strconv.FormatBool(x)
	case int8:
		return strconv.FormatInt(int64(x), 10)
	case int16:
		return strconv.FormatInt(int64(x), 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case int64:
		return strconv.FormatInt(x, 10)
	case int:
		return strconv.Itoa(x)
	case uint8:
		return strconv.FormatUint(uint64(x), 10)
	case uint16:
		return strconv.FormatUint(uint64(x), 10)
	case uint32:
		return strconv.FormatUint(uint64(x), 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprint(v)
}

// NewGuard returns a guard over store for a consumer of queue. The guard is
// the one place for the scope and the key: an empty opts.Scope becomes the
// queue name, the consumer's identity, so two services consuming copies of
// one message from their own queues never block each other; a set one is
// kept. opts.Key is kept too: its default, idem.MessageID, reads the
// message-id property, which MessageOf puts in idem.Message.ID. Without a
// scope, an empty queue name is an error wrapping idem.ErrInvalidOptions.
func NewGuard(store idem.Store, queue string, opts idem.Options) (*idem.Guard, error) {
	if opts.Scope == "" {
		if queue == "" {
			return nil, fmt.Errorf("%w: amqpidem: no queue to name the scope by; give the queue or set idem.Options.Scope", idem.ErrInvalidOptions)
		}
		opts.Scope = queue
	}
	return idem.New(store, opts)
}
