package eventhubs

import (
	"maps"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/idemgo/idem"
)

// Dead-letter properties. The idem properties (idem.HeaderReason,
// idem.HeaderError, idem.HeaderDeadLetterKey, idem.HeaderFingerprint and
// the idem.HeaderStored* ones, from broker.DeadLetterHeaders) say why;
// these say where from.
const (
	HeaderReason                 = idem.HeaderReason
	HeaderError                  = idem.HeaderError
	HeaderOriginalEventHub       = "Idem-Original-Event-Hub"
	HeaderOriginalPartition      = "Idem-Original-Partition"
	HeaderOriginalSequenceNumber = "Idem-Original-Sequence-Number"
	HeaderOriginalOffset         = "Idem-Original-Offset"
	HeaderOriginalEnqueuedTime   = "Idem-Original-Enqueued-Time" // RFC 3339, UTC
)

// DeadLetter builds the dead letter of ev, read from partition of
// eventHub, with the engine's dead-letter headers h
// (broker.DeadLetterHeaders): the same body, content type, message id and
// properties, then idem's properties and where it came from (they win
// over the original's of the same name).
func DeadLetter(eventHub, partition string, ev *azeventhubs.ReceivedEventData, h map[string]string) *azeventhubs.EventData {
	props := make(map[string]any, len(ev.Properties)+len(h)+5)
	maps.Copy(props, ev.Properties)
	for k, v := range h {
		props[k] = v
	}
	props[HeaderOriginalEventHub] = eventHub
	props[HeaderOriginalPartition] = partition
	props[HeaderOriginalSequenceNumber] = strconv.FormatInt(ev.SequenceNumber, 10)
	props[HeaderOriginalOffset] = ev.Offset
	if ev.EnqueuedTime != nil {
		props[HeaderOriginalEnqueuedTime] = ev.EnqueuedTime.UTC().Format(time.RFC3339Nano)
	}
	return &azeventhubs.EventData{Body: ev.Body, ContentType: ev.ContentType, MessageID: ev.MessageID,
		CorrelationID: ev.CorrelationID, Properties: props}
}
