package servicebus

import (
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
)

// DeadLetterOf reads dl, a message received from an entity's
// $DeadLetterQueue, as an operator's tool needs it: ID is the original's
// id as MessageOf read it (its Idem-Id, else its MessageID; a replay's as
// its original's), Payload its body, ContentType its content type, and
// Headers its application properties: idem's (Idem-Reason, Idem-Error,
// Idem-Key and the Idem-Stored-* properties), where it came from
// (Idem-Entity, Idem-Message-Id, Idem-Sequence-Number, Idem-Enqueued-Time,
// Idem-Delivery-Count) and the original's own, with Service Bus's
// DeadLetterReason and DeadLetterErrorDescription. It takes what Replay
// takes: a dead letter a Consumer wrote, or one Service Bus wrote itself at
// the entity's MaxDeliveryCount (DeadLetterReason
// MaxDeliveryCountExceeded, without idem's properties); any other message
// is read with MessageOf and returned with ErrNotDeadLetter.
func DeadLetterOf(dl *azservicebus.ReceivedMessage) (idem.Message, error) {
	im := MessageOf(dl)
	if im.Headers == nil {
		im.Headers = map[string]string{}
	}
	if dl.DeadLetterReason != nil {
		im.Headers["DeadLetterReason"] = *dl.DeadLetterReason
	}
	if dl.DeadLetterErrorDescription != nil {
		im.Headers["DeadLetterErrorDescription"] = *dl.DeadLetterErrorDescription
	}
	if !isDeadLetter(dl) {
		return im, ErrNotDeadLetter
	}
	return im, nil
}

// isDeadLetter reports whether dl is a dead letter a Consumer wrote (it
// has idem's reason), or one Service Bus wrote at MaxDeliveryCount.
func isDeadLetter(dl *azservicebus.ReceivedMessage) bool {
	if _, ok := dl.ApplicationProperties[idem.HeaderReason]; ok {
		return true
	}
	return dl.DeadLetterReason != nil && *dl.DeadLetterReason == ReasonMaxDeliveryCountExceeded
}
