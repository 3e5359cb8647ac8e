package servicebus

import (
	"context"
	"errors"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// ErrNotDeadLetter is returned by Replay for a message neither a Consumer
// (it has no Idem-Reason property) nor Service Bus at the entity's
// MaxDeliveryCount (DeadLetterReason MaxDeliveryCountExceeded) dead-lettered.
var ErrNotDeadLetter = errors.New("servicebus: not a dead letter of an idem consumer")

// ReasonMaxDeliveryCountExceeded is the DeadLetterReason Service Bus gives
// a message it dead-lettered itself at the entity's MaxDeliveryCount (a
// consumer that died holding its last delivery): Replay takes it too.
const ReasonMaxDeliveryCountExceeded = "MaxDeliveryCountExceeded"

// Replay sends dl, a dead letter a Consumer wrote, or one Service Bus
// wrote at MaxDeliveryCount (received from the entity's
// $DeadLetterQueue), to s, a sender on the queue (or the topic) it came
// from: its body, MessageID, SessionID, ContentType, Subject,
// CorrelationID and application properties as they were, without the ones idem and
// Service Bus put on it when dead-lettering it (Idem-* other than Idem-Id,
// DeadLetterReason, DeadLetterErrorDescription). It returns once Service
// Bus accepted the message; complete dl afterwards.
//
// The consumer's record then decides, as for any redelivery: a key
// completed meanwhile is a duplicate, completed without running the
// handler; a key never completed is processed; content that conflicts
// with the recorded key is dead-lettered again. Keep the guard's Retention
// longer than a dead letter may wait before it is replayed. A replay
// inside the entity's duplicate detection window with the same MessageID
// is dropped by Service Bus: replay after the window.
func Replay(ctx context.Context, s *azservicebus.Sender, dl *azservicebus.ReceivedMessage) error {
	msg, err := replayed(dl)
	if err != nil {
		return err
	}
	return s.SendMessage(ctx, msg, nil)
}

func replayed(dl *azservicebus.ReceivedMessage) (*azservicebus.Message, error) {
	_, ok := dl.ApplicationProperties["Idem-Reason"]
	if !ok && (dl.DeadLetterReason == nil || *dl.DeadLetterReason != ReasonMaxDeliveryCountExceeded) {
		return nil, ErrNotDeadLetter
	}
	msg := &azservicebus.Message{
		Body: dl.Body, ContentType: dl.ContentType, Subject: dl.Subject, CorrelationID: dl.CorrelationID,
		SessionID:             dl.SessionID, // a session entity's message goes back to its session
		ApplicationProperties: map[string]any{},
	}
	id := dl.MessageID
	if orig, ok := dl.ApplicationProperties[HeaderMessageID].(string); ok && orig != "" {
		id = orig
	}
	msg.MessageID = &id
	for k, v := range dl.ApplicationProperties {
		if k == "DeadLetterReason" || k == "DeadLetterErrorDescription" ||
			(strings.HasPrefix(k, "Idem-") && k != HeaderID) {
			continue
		}
		msg.ApplicationProperties[k] = v
	}
	return msg, nil
}
