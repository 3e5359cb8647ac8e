package eventhubs

import (
	"errors"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/amqpprop"
)

// HeaderID is the property that carries an event's key when it is not
// its MessageID (Send sets both).
const HeaderID = "Idem-Id"

// MessageOf builds the idem.Message the guard sees: ID from the Idem-Id
// property (HeaderID), else the event's MessageID; Headers from the
// properties (strings as they are, other values formatted with fmt; the
// CloudEvents AMQP binding's cloudEvents:* properties are what
// idem.CloudEventsKey reads), Payload from the body, ContentType from the
// content type. The sequence number and the offset are deliberately left
// out: a producer's re-send of the same event gets new ones.
func MessageOf(ev *azeventhubs.ReceivedEventData) idem.Message {
	im := idem.Message{Payload: ev.Body}
	if ev.MessageID != nil {
		im.ID = *ev.MessageID
	}
	if ev.ContentType != nil {
		im.ContentType = *ev.ContentType
	}
	if len(ev.Properties) > 0 {
		im.Headers = make(map[string]string, len(ev.Properties))
		for k, v := range ev.Properties {
			im.Headers[k] = amqpprop.Text(v)
		}
		if id := im.Headers[HeaderID]; id != "" {
			im.ID = id
		}
	}
	return im
}

// ErrNotDeadLetter is returned by DeadLetterOf and Replay for an event
// that is not a dead letter a Consumer wrote.
var ErrNotDeadLetter = errors.New("eventhubs: not a dead letter (no Idem-Reason property)")

// DeadLetterOf reads dl, an event received from the dead-letter hub, as
// an operator's tool needs it: MessageOf's view, whose Headers hold
// idem's properties (Idem-Reason, Idem-Error, Idem-Key, the
// Idem-Stored-* ones) and where the event came from
// (Idem-Original-Event-Hub, -Partition, -Sequence-Number, -Offset,
// -Enqueued-Time). Any other event is read with MessageOf and returned
// with ErrNotDeadLetter.
func DeadLetterOf(dl *azeventhubs.ReceivedEventData) (idem.Message, error) {
	im := MessageOf(dl)
	if _, ok := im.Headers[idem.HeaderReason]; !ok {
		return im, ErrNotDeadLetter
	}
	return im, nil
}

// Scope is the default scope of a consumer: the event hub and the
// consumer group ("orders/$Default"), one consumer identity on a
// namespace.
func Scope(eventHub, consumerGroup string) string {
	return eventHub + "/" + consumerGroup
}

// NewGuard is idem.New with opts.Scope defaulting to Scope(eventHub,
// consumerGroup).
func NewGuard(store idem.Store, eventHub, consumerGroup string, opts idem.Options) (*idem.Guard, error) {
	if opts.Scope == "" {
		if eventHub == "" || consumerGroup == "" {
			return nil, fmt.Errorf("%w: eventhubs: no event hub or consumer group for the scope", idem.ErrInvalidOptions)
		}
		opts.Scope = Scope(eventHub, consumerGroup)
	}
	return idem.New(store, opts)
}
