package servicebus

import (
	"context"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
)

// ErrNotDeadLetter is returned by Replay and DeadLetterOf for a message
// neither a Consumer (it has no Idem-Reason property) nor Service Bus at
// the entity's MaxDeliveryCount (DeadLetterReason
// MaxDeliveryCountExceeded) dead-lettered.
var ErrNotDeadLetter = errors.New("servicebus: not a dead letter of an idem consumer")

// ReasonMaxDeliveryCountExceeded is the DeadLetterReason Service Bus gives
// a message it dead-lettered itself at the entity's MaxDeliveryCount (a
// consumer that died holding its last delivery): Replay takes it too.
const ReasonMaxDeliveryCountExceeded = "MaxDeliveryCountExceeded"

// Replay sends dl, a dead letter a Consumer wrote, or one Service Bus
// wrote at MaxDeliveryCount (received from the entity's
// $DeadLetterQueue), to s, a sender on the queue (or the topic) it came
// from: its body, SessionID, ContentType, Subject, CorrelationID and
// application properties as they were, without the ones idem and Service
// Bus put on it when dead-lettering it (Idem-* other than Idem-Id,
// DeadLetterReason, DeadLetterErrorDescription). It returns once Service
// Bus accepted the message; complete dl afterwards.
//
// The replay's MessageID is one of its own: the original's, "~replay-"
// and a random nonce. An entity with duplicate detection remembers the
// original's MessageID for its window (up to seven days) and would drop a
// replay that carried it, silently; the consumer deduplicates by the key,
// and MessageOf reads a replay's MessageID as the original's, so a replay
// is never dropped by duplicate detection and the guard sees it as it saw
// the original: same id, same key. (An original MessageID too long to
// take the mark within Service Bus's 128 characters is cut in the replay's,
// and travels whole in an Idem-Replay-Of property, which MessageOf reads
// and leaves out of Headers.) Each call is a replay of its own: replaying
// dl twice sends it twice, and the consumer's record makes the second a
// duplicate.
//
// The consumer's record then decides, as for any redelivery: a key
// completed meanwhile is a duplicate, completed without running the
// handler; a key never completed is processed; content that conflicts
// with the recorded key is dead-lettered again. Keep the guard's Retention
// longer than a dead letter may wait before it is replayed.
func Replay(ctx context.Context, s *azservicebus.Sender, dl *azservicebus.ReceivedMessage) error {
	msg, err := replayed(dl)
	if err != nil {
		return err
	}
	return s.SendMessage(ctx, msg, nil)
}

func replayed(dl *azservicebus.ReceivedMessage) (*azservicebus.Message, error) {
	if !isDeadLetter(dl) {
		return nil, ErrNotDeadLetter
	}
	msg := &azservicebus.Message{
		Body: dl.Body, ContentType: dl.ContentType, Subject: dl.Subject, CorrelationID: dl.CorrelationID,
		SessionID:             dl.SessionID, // a session entity's message goes back to its session
		ApplicationProperties: map[string]any{},
	}
	orig := dl.MessageID
	if p, ok := dl.ApplicationProperties[HeaderMessageID].(string); ok && p != "" {
		orig = p
	}
	// The dead letter of a replay: back to the first original's MessageID.
	orig, _ = originalMessageID(orig, dl.ApplicationProperties)
	for k, v := range dl.ApplicationProperties {
		if k == "DeadLetterReason" || k == "DeadLetterErrorDescription" ||
			(strings.HasPrefix(k, "Idem-") && k != HeaderID) {
			continue
		}
		msg.ApplicationProperties[k] = v
	}
	id, cut := replayMessageID(orig)
	msg.MessageID = &id
	if cut {
		msg.ApplicationProperties[headerReplayOf] = orig
	}
	return msg, nil
}

// maxMessageID is the longest MessageID Service Bus takes.
const maxMessageID = 128

// headerReplayOf carries the original's MessageID on a replay whose own
// could hold only the start of it.
const headerReplayOf = "Idem-Replay-Of"

// replayMessageID is a MessageID of its own for a replay of a message
// whose MessageID was orig: idem.ReplayDedupID of orig, cut at
// maxMessageID less the mark and the nonce, at a character's start (cut
// reports it).
func replayMessageID(orig string) (id string, cut bool) {
	stem := orig
	if n := maxMessageID - len(replayMark) - 16; len(stem) > n {
		for n > 0 && !utf8.RuneStart(stem[n]) {
			n--
		}
		stem, cut = stem[:n], true
	}
	return idem.ReplayDedupID(stem), cut
}

// replayMark is what idem.ReplayDedupID puts between the original's id and
// the nonce.
const replayMark = "~replay-"

// originalMessageID is the MessageID of the original that id, a replay's
// (replayMessageID's form), was made from: id without the mark and the
// nonce (idem.OriginalDedupID), or the Idem-Replay-Of property of props
// when the stem is its start (whole reports that it was used). Any other
// id is its own.
func originalMessageID(id string, props map[string]any) (orig string, whole bool) {
	stem, ok := idem.OriginalDedupID(id)
	if !ok {
		return id, false
	}
	if full, _ := props[headerReplayOf].(string); full != "" && strings.HasPrefix(full, stem) {
		return full, true
	}
	return stem, false
}
