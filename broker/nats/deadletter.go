package natsidem

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
)

// DeadLetterOf reads dl, a dead letter a Consumer wrote (read back from
// the dead-letter stream), as an operator's tool needs it: ID is the
// original's id as MessageOf read it (its Idem-Id, else its Nats-Msg-Id,
// restored from Idem-Original-Nats-Msg-Id; a replay's as its original's),
// Payload its data, ContentType its Content-Type, and Headers the dead
// letter's (the first value of each): idem's (Idem-Reason, Idem-Error,
// Idem-Key and the Idem-Stored-* headers), where it came from
// (Idem-Subject, Idem-Stream, Idem-Stream-Seq, Idem-Consumer,
// Idem-Deliveries) and the original's own. A message that is no dead
// letter of this package (no Idem-Subject header) is read with MessageOf
// and returned with ErrNotDeadLetter.
func DeadLetterOf(dl jetstream.Msg) (idem.Message, error) {
	h, data := dl.Headers(), dl.Data()
	im := messageOf(h, data)
	orig, err := replayed(h, data)
	if err != nil {
		return im, err
	}
	im.ID = messageOf(orig.Header, data).ID
	return im, nil
}
