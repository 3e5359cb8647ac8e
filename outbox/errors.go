package outbox

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrInvalidMessage is wrapped by every refusal of a message passed to
	// Enqueue (see MessageError): nothing of the call was written.
	ErrInvalidMessage = errors.New("outbox: invalid message")
	// ErrNoDestination means a message has no Destination (topic, subject
	// or exchange).
	ErrNoDestination = errors.New("outbox: message has no destination")
	// ErrPayloadTooLarge means a payload is over Limits.MaxPayload.
	ErrPayloadTooLarge = errors.New("outbox: payload too large")
	// ErrHeadersTooLarge means a message's headers are over
	// Limits.MaxHeaderBytes.
	ErrHeadersTooLarge = errors.New("outbox: headers too large")
	// ErrInvalidID means a message id is too long or not text.
	ErrInvalidID = errors.New("outbox: invalid message id")
	// ErrInvalidField means a destination, routing key, ordering key or
	// header is too long or not text a broker can carry (NUL, CR, LF,
	// invalid UTF-8).
	ErrInvalidField = errors.New("outbox: invalid message field")
	// ErrDuplicateID means one Enqueue call holds two messages with the
	// same id.
	ErrDuplicateID = errors.New("outbox: two messages of one call share an id")

	// ErrConflict means a message id is already in the outbox with other
	// content (see ConflictError). It also matches idem.ErrConflict, so an
	// inbound message whose handler hits it is dead-lettered, never retried
	// forever.
	ErrConflict = errors.New("outbox: message id reused with different content")

	// ErrRejected marks a publish error that retrying cannot fix: the
	// broker refused the message itself (too large, a malformed header).
	// The relay parks such a message instead of retrying it. Publishers
	// wrap those errors with Reject.
	ErrRejected = errors.New("outbox: the broker rejected the message")

	// ErrCannotSchedule means a message has a NotBefore time and its
	// publisher's broker cannot hold a message until a time (see
	// ScheduleError). It is wrapped with ErrRejected: the relay parks the
	// message rather than deliver it early.
	ErrCannotSchedule = errors.New("outbox: the broker cannot schedule messages")

	// ErrInvalidOptions means options failed validation.
	ErrInvalidOptions = errors.New("outbox: invalid options")
)

// MessageError is Enqueue's refusal of one message. It unwraps to the
// specific sentinel (ErrNoDestination, ErrPayloadTooLarge, ...), to
// ErrInvalidMessage and to idem.ErrPermanent: the same handler would fail
// the same way on every redelivery, so an inbound message whose handler
// returns it is dead-lettered.
type MessageError struct {
	Index  int    // the message's position in the call
	ID     string // its id, when it had one
	Err    error  // the specific sentinel
	Reason string // what is wrong, for people
}

// Error names the message and what is wrong with it.
func (e *MessageError) Error() string {
	id := ""
	if e.ID != "" {
		id = fmt.Sprintf(" (id %.80q)", e.ID)
	}
	return fmt.Sprintf("%v: message %d%s: %s", e.Err, e.Index, id, e.Reason)
}

// Unwrap returns the specific sentinel, ErrInvalidMessage and
// idem.ErrPermanent.
func (e *MessageError) Unwrap() []error { return []error{e.Err, ErrInvalidMessage, idem.ErrPermanent} }

// ConflictError reports a message whose id the outbox already holds with
// another fingerprint (another destination, key or payload): a producer
// reusing an id, or a handler that is not deterministic across runs. It
// unwraps to ErrConflict and idem.ErrConflict.
type ConflictError struct {
	ID          string
	Fingerprint string // the new message's
	Stored      string // the stored message's
}

// Error names the id and both fingerprints, shortened.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("outbox: message id %.80q reused with different content (stored fingerprint %.12s, new %.12s)",
		e.ID, e.Stored, e.Fingerprint)
}

// Unwrap returns ErrConflict and idem.ErrConflict.
func (e *ConflictError) Unwrap() []error { return []error{ErrConflict, idem.ErrConflict} }

// rejected marks a publish error as ErrRejected.
type rejected struct{ err error }

func (e rejected) Error() string   { return e.err.Error() }
func (e rejected) Unwrap() []error { return []error{e.err, ErrRejected} }

// Reject wraps a broker's refusal of a message (too large, malformed) so
// that the relay parks it instead of retrying it. Reject(nil) is nil.
func Reject(err error) error {
	if err == nil {
		return nil
	}
	return rejected{err}
}

// IsRejected reports whether err wraps ErrRejected.
func IsRejected(err error) bool { return errors.Is(err, ErrRejected) }

// ScheduleError is a publisher's refusal of a message with a NotBefore
// time that its broker cannot schedule. It unwraps to ErrCannotSchedule and
// ErrRejected, so the relay parks the message (idem outbox list --state
// parked) instead of delivering it early.
type ScheduleError struct {
	Publisher string    // the publisher's package ("outboxkafka")
	ID        string    // the message's id
	NotBefore time.Time // the time it asked for
}

// Error names the message, the time and the publisher.
func (e *ScheduleError) Error() string {
	return fmt.Sprintf("%s: message %.80q is scheduled for %s, and this broker cannot schedule messages (publish it through a publisher that can, or enqueue it without NotBefore)",
		e.Publisher, e.ID, e.NotBefore.UTC().Format(time.RFC3339Nano))
}

// Unwrap returns ErrCannotSchedule and ErrRejected.
func (e *ScheduleError) Unwrap() []error { return []error{ErrCannotSchedule, ErrRejected} }

// Unscheduled publishes recs with publish, except those with a NotBefore
// time, which get a *ScheduleError naming publisher: what a publisher whose
// broker cannot schedule does in its Publish. The errors are in recs'
// order.
func Unscheduled(publisher string, recs []Record, publish func([]Record) []error) []error {
	errs := make([]error, len(recs))
	send, at := make([]Record, 0, len(recs)), make([]int, 0, len(recs))
	for i, r := range recs {
		if r.NotBefore.IsZero() {
			send, at = append(send, r), append(at, i)
		} else {
			errs[i] = &ScheduleError{Publisher: publisher, ID: r.ID, NotBefore: r.NotBefore}
		}
	}
	switch {
	case len(send) == len(recs):
		return publish(recs)
	case len(send) > 0:
		for k, err := range publish(send) {
			errs[at[k]] = err
		}
	}
	return errs
}
