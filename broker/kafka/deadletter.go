package kafka

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
)

// DeadLetterOf reads dl, a dead letter a Consumer wrote (read back from
// the dead-letter topic), as an operator's tool needs it: ID is the
// original record's id as MessageOf read it (its idempotency-key header),
// Payload its value, ContentType its content type, and Headers the dead
// letter's: idem's (Idem-Reason, Idem-Error, Idem-Key and the
// Idem-Stored-* headers), where it came from (Idem-Original-Topic,
// -Partition, -Offset, -Timestamp) and the original's own. A record that
// is no dead letter of this package (no Idem-Original-Topic header) is
// read with MessageOf and returned with ErrNotDeadLetter.
func DeadLetterOf(dl *kgo.Record) (idem.Message, error) {
	im := MessageOf(dl)
	orig, err := replayed(dl)
	if err != nil {
		return im, err
	}
	im.ID = MessageOf(orig).ID
	return im, nil
}
