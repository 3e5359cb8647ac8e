package eventhubs

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/idemgo/idem"
)

// Send sends events through p in as few batches as they fit (opts: the
// batches' partition or partition key; nil: Event Hubs chooses), each
// event with its key: its MessageID, copied into the Idem-Id property
// (HeaderID) so that it survives a re-send through another client. An
// event without a MessageID, or too large for a batch of its own, is
// refused before anything is sent, with an error wrapping
// idem.ErrInvalidKey or azeventhubs.ErrEventDataTooLarge. A re-send of
// the same events (a producer retry) carries the same keys: the
// consumer's records skip what was applied.
func Send(ctx context.Context, p *azeventhubs.ProducerClient, opts *azeventhubs.EventDataBatchOptions, events ...*azeventhubs.EventData) error {
	keyed := make([]*azeventhubs.EventData, len(events))
	for i, ev := range events {
		if ev == nil || ev.MessageID == nil || *ev.MessageID == "" {
			return fmt.Errorf("%w: eventhubs: event %d has no MessageID", idem.ErrInvalidKey, i)
		}
		c := *ev
		c.Properties = maps.Clone(ev.Properties)
		if c.Properties == nil {
			c.Properties = map[string]any{}
		}
		c.Properties[HeaderID] = *ev.MessageID
		keyed[i] = &c
	}
	return sendBatches(ctx, p, opts, keyed)
}

// send sends one event, keeping its partition key.
func send(ctx context.Context, p *azeventhubs.ProducerClient, partitionKey *string, ev *azeventhubs.EventData) error {
	var opts *azeventhubs.EventDataBatchOptions
	if partitionKey != nil {
		opts = &azeventhubs.EventDataBatchOptions{PartitionKey: partitionKey}
	}
	return sendBatches(ctx, p, opts, []*azeventhubs.EventData{ev})
}

func sendBatches(ctx context.Context, p *azeventhubs.ProducerClient, opts *azeventhubs.EventDataBatchOptions, events []*azeventhubs.EventData) error {
	b, err := p.NewEventDataBatch(ctx, opts)
	if err != nil {
		return err
	}
	for i := 0; i < len(events); {
		err := b.AddEventData(events[i], nil)
		switch {
		case err == nil:
			i++
			continue
		case !errors.Is(err, azeventhubs.ErrEventDataTooLarge) || b.NumEvents() == 0:
			return fmt.Errorf("eventhubs: event %d: %w", i, err)
		}
		if err := p.SendEventDataBatch(ctx, b, nil); err != nil {
			return err
		}
		if b, err = p.NewEventDataBatch(ctx, opts); err != nil {
			return err
		}
	}
	if b.NumEvents() == 0 {
		return nil
	}
	return p.SendEventDataBatch(ctx, b, nil)
}
