package pubsubidem

import (
	"errors"
	"strings"

	"cloud.google.com/go/pubsub/v2"

	"github.com/idemgo/idem"
)

// ErrNotDeadLetter is returned by DeadLetterOf for a message that neither
// a Consumer dead-lettered (it has no Idem-Reason or Idem-Subscription
// attribute) nor Pub/Sub forwarded under a dead-letter policy (no
// CloudPubSubDeadLetterSource* attribute).
var ErrNotDeadLetter = errors.New("pubsubidem: not a dead letter")

// DeadLetterOf reads dl, a message received from the dead-letter topic, as
// an operator's tool needs it: ID is the original's id as MessageOf read
// it (its Idem-Id attribute, which the dead letter keeps), Payload its
// data, ContentType its Content-Type, and Headers its attributes: idem's
// (Idem-Reason, Idem-Error, Idem-Key and the Idem-Stored-* attributes),
// where it came from (Idem-Subscription, Idem-Original-Position,
// Idem-Publish-Time, Idem-Delivery-Attempt, Idem-Ordering-Key) and the
// original's own. A message Pub/Sub forwarded itself under the
// subscription's dead-letter policy has none of idem's attributes but
// Pub/Sub's CloudPubSubDeadLetterSource* ones, and is read the same way.
// Any other message is read with MessageOf and returned with
// ErrNotDeadLetter (an emulator that forwards without Pub/Sub's attributes,
// such as pstest, leaves its forwarded ones looking so; Replay takes them
// all).
func DeadLetterOf(dl *pubsub.Message) (idem.Message, error) {
	im := MessageOf(&Message{Message: dl})
	if dl == nil {
		return im, ErrNotDeadLetter
	}
	for k := range dl.Attributes {
		if k == idem.HeaderReason || k == HeaderSubscription || strings.HasPrefix(k, "CloudPubSubDeadLetterSource") {
			return im, nil
		}
	}
	return im, ErrNotDeadLetter
}
