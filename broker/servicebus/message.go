package servicebus

import (
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/amqpprop"
)

// HeaderID is the application property that carries the plain message id
// of a message sent by Send, whose MessageID is the queue's duplicate
// detection id (idem.DedupID: the id and a digest of the content).
const HeaderID = "Idem-Id"

// MessageOf builds the idem.Message the guard sees: ID from the Idem-Id
// application property (HeaderID, set by Send), else MessageID; Headers
// from the application properties (strings as they are, other values
// formatted with fmt), Payload from the body, ContentType from the
// ContentType property. A replay's MessageID (the original's, "~replay-"
// and a nonce: see Replay) reads as the original's, so the guard sees a
// replay as it saw the original. Values that change on redelivery (LockToken,
// SequenceNumber, DeliveryCount, LockedUntil) are deliberately left out,
// and so is CorrelationID: it names a group of messages (a conversation,
// a request and its replies), not one message.
func MessageOf(msg *azservicebus.ReceivedMessage) idem.Message {
	id, whole := originalMessageID(msg.MessageID, msg.ApplicationProperties)
	im := idem.Message{ID: id, Payload: msg.Body}
	if msg.ContentType != nil {
		im.ContentType = *msg.ContentType
	}
	if len(msg.ApplicationProperties) > 0 {
		im.Headers = make(map[string]string, len(msg.ApplicationProperties))
		for k, v := range msg.ApplicationProperties {
			if k == headerReplayOf && whole {
				continue // Replay's, not the original's
			}
			im.Headers[k] = amqpprop.Text(v)
		}
	}
	if plain := im.Headers[HeaderID]; plain != "" && idem.IsDedupID(im.ID, plain) {
		im.ID = plain
	}
	return im
}

// EntityPath is the default scope of a consumer of a queue
// (EntityPath("orders")) or a subscription
// (EntityPath("events", "billing") is "events/Subscriptions/billing"):
// its entity path, which names one consumer identity on a namespace.
func EntityPath(queueOrTopic string, subscription ...string) string {
	if len(subscription) > 0 && subscription[0] != "" {
		return queueOrTopic + "/Subscriptions/" + subscription[0]
	}
	return queueOrTopic
}

// NewGuard is idem.New with opts.Scope defaulting to entityPath (see
// EntityPath).
func NewGuard(store idem.Store, entityPath string, opts idem.Options) (*idem.Guard, error) {
	if opts.Scope == "" {
		if entityPath == "" {
			return nil, fmt.Errorf("%w: servicebus: no entity path for the scope", idem.ErrInvalidOptions)
		}
		opts.Scope = entityPath
	}
	return idem.New(store, opts)
}
