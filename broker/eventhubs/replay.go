package eventhubs

import (
	"context"
	"maps"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/idemgo/idem/broker"
)

// Replay sends the original of dl, a dead letter a Consumer wrote, back
// through p (a producer of the original hub, or any other): its body,
// content type, message id, partition key and own properties, without
// idem's and the Idem-Original-* ones. The replay carries the original's
// key, so its record decides: a key dead-lettered for a conflict stays a
// conflict until the operator resolves the record (idem resolve). Any
// other event is refused with ErrNotDeadLetter.
func Replay(ctx context.Context, p *azeventhubs.ProducerClient, dl *azeventhubs.ReceivedEventData) error {
	if _, err := DeadLetterOf(dl); err != nil {
		return err
	}
	props := maps.Clone(dl.Properties)
	for k := range props {
		if broker.IsDeadLetterHeader(k) || k == HeaderOriginalEventHub || k == HeaderOriginalPartition ||
			k == HeaderOriginalSequenceNumber || k == HeaderOriginalOffset || k == HeaderOriginalEnqueuedTime {
			delete(props, k)
		}
	}
	ev := &azeventhubs.EventData{Body: dl.Body, ContentType: dl.ContentType, MessageID: dl.MessageID,
		CorrelationID: dl.CorrelationID, Properties: props}
	return send(ctx, p, dl.PartitionKey, ev)
}
