package redisstream

import (
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
)

// ErrNotDeadLetter is returned by DeadLetterOf and Replay for an entry
// that is not a dead letter a Consumer wrote: it has no
// Idem-Original-Stream field.
var ErrNotDeadLetter = errors.New("redisstream: not a dead letter (no " + FieldStream + " field)")

// DeadLetterOf reads dl, an entry of a dead-letter stream, as an
// operator's tool needs it: ID is the original's id as MessageOf read it
// (its Idem-Id field, which the dead letter keeps), Payload its payload,
// ContentType its Content-Type field, and Headers the dead letter's other
// fields: idem's (Idem-Reason, Idem-Error, Idem-Key and the Idem-Stored-*
// fields), where it came from (Idem-Original-Stream,
// Idem-Original-Position, Idem-Group, Idem-Deliveries) and the original's
// own. An entry that is no dead letter of this package (no
// Idem-Original-Stream field) is read with MessageOf and returned with
// ErrNotDeadLetter.
func DeadLetterOf(dl redis.XMessage) (idem.Message, error) {
	im := MessageOf(&Message{XMessage: dl})
	if s, _ := dl.Values[FieldStream].(string); s == "" {
		return im, ErrNotDeadLetter
	}
	return im, nil
}
