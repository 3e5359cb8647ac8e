package watermillidem

import (
	"errors"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idemgo/idem"
)

// ErrNotDeadLetter is returned by DeadLetterOf and Replay for a message
// that is not a dead letter a Middleware wrote: it has no
// Idem-Original-Topic metadata field (HeaderTopic).
var ErrNotDeadLetter = errors.New("watermillidem: not a dead letter (no " + HeaderTopic + " metadata)")

// DeadLetterOf reads dl, a message received from a PoisonTopic, as an
// operator's tool needs it: ID is the original's id as MessageOf read it
// (its Idem-Id metadata field, else its UUID, both of which the dead
// letter keeps), Payload its payload, ContentType its Content-Type, and
// Headers the dead letter's metadata: idem's (Idem-Reason, Idem-Error,
// Idem-Key and the Idem-Stored-* fields), where it came from
// (Idem-Original-Topic, Idem-Handler and Watermill's *_poisoned fields)
// and the original's own. A message that is no dead letter of this
// package is read with MessageOf and returned with ErrNotDeadLetter.
func DeadLetterOf(dl *message.Message) (idem.Message, error) {
	im := MessageOf(dl)
	if dl.Metadata[HeaderTopic] == "" {
		return im, ErrNotDeadLetter
	}
	return im, nil
}
