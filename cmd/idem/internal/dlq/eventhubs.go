package dlq

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/idemgo/idem/broker/eventhubs"
)

// EventHubsPrefix starts an Event Hubs broker string: an Event Hubs
// connection string has the shape of a Service Bus one (Endpoint=sb://...),
// which the plain form stays.
const EventHubsPrefix = "eventhubs:"

// ehQueue reads a dead-letter event hub, every partition from its earliest
// event to the last one enqueued at the call's start, with partition
// clients of a consumer group and no owner level (nothing is
// checkpointed). A replayed dead letter stays in its hub: Event Hubs
// cannot delete one event.
type ehQueue struct {
	conn  string // the namespace connection string, without EntityPath
	name  string // the broker string, key redacted
	hub   string // the dead-letter hub (EntityPath)
	group string // the consumer group read through (ConsumerGroup=, default $Default)
	cc    *azeventhubs.ConsumerClient
}

// OpenEventHubs opens eventhubs:CONNECTION-STRING with EntityPath=HUB,
// the dead-letter hub the consumers' Options.DeadLetter sends to, and
// optionally ConsumerGroup=G, the group it is read through (default
// $Default; idem's key, not the SDK's, removed before the client sees the
// string). u is not read.
func OpenEventHubs(_ context.Context, _ *url.URL, raw string) (Queue, error) {
	q := &ehQueue{name: Redact(raw), group: azeventhubs.DefaultConsumerGroup}
	vals, conn := cutKeys(raw[len(EventHubsPrefix):], "entitypath", "consumergroup")
	if q.hub = vals["entitypath"]; q.hub == "" {
		return nil, fmt.Errorf("%w: %s needs EntityPath=HUB: the dead-letter event hub to read", ErrBadURL, q.name)
	}
	if g := vals["consumergroup"]; g != "" {
		q.group = g
	}
	q.conn = conn
	cc, err := azeventhubs.NewConsumerClientFromConnectionString(q.conn, q.hub, q.group, &azeventhubs.ConsumerClientOptions{
		RetryOptions: azeventhubs.RetryOptions{MaxRetries: 2}}) // an operator's tool: an answer, not minutes of retries
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadURL, q.name, err)
	}
	q.cc = cc
	return q, nil
}

func (q *ehQueue) Name() string { return "Event Hubs " + q.hub + " at " + q.name }

func (q *ehQueue) Close() error { return q.cc.Close(context.Background()) }

// receiveWait bounds one receive of events the partition properties say
// are there.
const receiveWait = 10 * time.Second

// each reads every event of the dead-letter hub up to the last one
// enqueued at the call's start, partition by partition (in the hub's
// order) in sequence order, until f returns false.
func (q *ehQueue) each(ctx context.Context, f func(*azeventhubs.ReceivedEventData, DeadLetter) bool) error {
	props, err := q.cc.GetEventHubProperties(ctx, nil)
	if err != nil {
		return fmt.Errorf("dead-letter hub %s: %w", q.Name(), err)
	}
	for _, id := range props.PartitionIDs {
		pp, err := q.cc.GetPartitionProperties(ctx, id, nil)
		if err != nil {
			return fmt.Errorf("partition %s of %s: %w", id, q.Name(), err)
		}
		if pp.IsEmpty {
			continue
		}
		more, err := q.partition(ctx, id, pp.LastEnqueuedSequenceNumber, f)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// partition reads one partition from its earliest event to last; more
// is false once f returned false.
func (q *ehQueue) partition(ctx context.Context, id string, last int64, f func(*azeventhubs.ReceivedEventData, DeadLetter) bool) (more bool, err error) {
	yes := true
	pc, err := q.cc.NewPartitionClient(id, &azeventhubs.PartitionClientOptions{StartPosition: azeventhubs.StartPosition{Earliest: &yes}})
	if err != nil {
		return false, err
	}
	defer pc.Close(context.Background())
	for at := int64(-1); at < last; {
		rctx, cancel := context.WithTimeout(ctx, receiveWait)
		evs, err := pc.ReceiveEvents(rctx, int(min(100, last-at)), nil)
		cancel()
		if len(evs) == 0 {
			if err == nil {
				err = errors.New("no event received")
			}
			return false, fmt.Errorf("read partition %s of %s up to sequence number %d: %w", id, q.Name(), last, err)
		}
		for _, ev := range evs {
			if ev.SequenceNumber > last {
				return true, nil
			}
			at = ev.SequenceNumber
			if !f(ev, ehDeadLetter(id, ev)) {
				return false, nil
			}
		}
	}
	return true, nil
}

// ehDeadLetter reads a dead letter with eventhubs.DeadLetterOf: its id is
// "PARTITION/SEQUENCE-NUMBER" in the dead-letter hub, its source the
// original hub, partition and sequence number.
func ehDeadLetter(partition string, ev *azeventhubs.ReceivedEventData) DeadLetter {
	im, _ := eventhubs.DeadLetterOf(ev) // an event no Consumer wrote is listed too, without a reason
	h := im.Headers
	if h == nil {
		h = map[string]string{}
	}
	dl := deadLetterOf(partition+"/"+strconv.FormatInt(ev.SequenceNumber, 10), h, ev.Body)
	if hub := h[eventhubs.HeaderOriginalEventHub]; hub != "" {
		dl.Source = fmt.Sprintf("%s partition %s #%s", hub, h[eventhubs.HeaderOriginalPartition], h[eventhubs.HeaderOriginalSequenceNumber])
	}
	if ev.EnqueuedTime != nil {
		dl.At = *ev.EnqueuedTime
	}
	return dl
}

func (q *ehQueue) List(ctx context.Context, limit int) ([]DeadLetter, error) {
	var out []DeadLetter
	err := q.each(ctx, func(_ *azeventhubs.ReceivedEventData, dl DeadLetter) bool {
		out = append(out, dl)
		return limit <= 0 || len(out) < limit
	})
	return out, err
}

// Replay sends each selected dead letter's original back to its hub (the
// Idem-Original-Event-Hub property) with eventhubs.Replay. The dead letter
// stays in its hub.
func (q *ehQueue) Replay(ctx context.Context, ids []string, done func(DeadLetter, error)) error {
	want := idSet(ids)
	producers := map[string]*azeventhubs.ProducerClient{}
	defer func() {
		for _, p := range producers {
			p.Close(context.Background())
		}
	}()
	return q.each(ctx, func(ev *azeventhubs.ReceivedEventData, dl DeadLetter) bool {
		if !want[dl.ID] {
			return true
		}
		delete(want, dl.ID)
		hub := dl.Headers[eventhubs.HeaderOriginalEventHub]
		p, err := producers[hub], error(nil)
		switch {
		case hub == "":
			err = fmt.Errorf("no %s property: not a dead letter an idem consumer wrote (%w)", eventhubs.HeaderOriginalEventHub, eventhubs.ErrNotDeadLetter)
		case p == nil:
			if p, err = azeventhubs.NewProducerClientFromConnectionString(q.conn, hub, nil); err == nil {
				producers[hub] = p
			}
		}
		if err == nil {
			err = eventhubs.Replay(ctx, p, ev)
		}
		done(dl, err)
		return len(want) > 0
	})
}

// Horizon reads the dead-letter hub's properties (it exists and answers)
// and says plainly what it cannot read: an event hub's retention, how long
// it keeps a dead letter (and the consumed hub an event a checkpoint moved
// back reads again), is not among the properties the Event Hubs protocol
// gives (azeventhubs' EventHubProperties carry none, nor does
// eventhubstest model it). Event Hubs has no delivery count: the
// consumers' MaxDeliveries is the only redelivery budget.
func (q *ehQueue) Horizon(ctx context.Context) ([]Span, []error, error) {
	if _, err := q.cc.GetEventHubProperties(ctx, nil); err != nil {
		return nil, nil, fmt.Errorf("dead-letter hub %s: %w", q.Name(), err)
	}
	return nil, []error{fmt.Errorf("%w: event hub %s: its retention (how long it keeps a dead letter for a replay) is not in the properties the Event Hubs protocol gives, "+
		"nor is the consumed hub's (how far back a checkpoint can read again); read them (az eventhubs eventhub show --query retentionDescription) "+
		"and pass the longer as --redelivery-horizon", ErrNotReadable, q.hub)}, nil
}

var _ Horizoner = (*ehQueue)(nil)
