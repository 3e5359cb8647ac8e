package mqttidem

import (
	"errors"

	"github.com/eclipse/paho.golang/paho"

	"github.com/idemgo/idem"
)

// ErrNotDeadLetter is returned by DeadLetterOf and Replay for a message
// that is not a dead letter a Consumer wrote: it has no
// Idem-Original-Topic user property (PropertyTopic).
var ErrNotDeadLetter = errors.New("mqtt: not a dead letter (no " + PropertyTopic + " property)")

// DeadLetterOf reads dl, a message received from a DeadLetterTopic, as an
// operator's tool needs it: ID is the original's id as MessageOf read it
// (its idem-id user property, which the dead letter keeps), Payload its
// payload, ContentType its content type, and Headers the dead letter's
// other user properties: idem's (Idem-Reason, Idem-Error, Idem-Key and the
// Idem-Stored-* properties), where it came from (Idem-Original-Topic,
// Idem-Client-Id) and the original's own. A message that is no dead
// letter of this package is read with MessageOf and returned with
// ErrNotDeadLetter.
func DeadLetterOf(dl *paho.Publish) (idem.Message, error) {
	im := MessageOf(&Message{Publish: dl})
	if im.Headers[PropertyTopic] == "" {
		return im, ErrNotDeadLetter
	}
	return im, nil
}
