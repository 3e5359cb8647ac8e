package dlq

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem/broker/servicebus"
)

// sbQueue reads an entity's $DeadLetterQueue: List peeks (no lock, no
// delivery counted); Replay receives in PeekLock, replays and completes
// the selected dead letters and abandons the others it received.
type sbQueue struct {
	client *azservicebus.Client
	name   string
	entity string // queue, or TOPIC/Subscriptions/SUB
}

func openServiceBus(_ context.Context, raw string) (Queue, error) {
	q := &sbQueue{name: Redact(raw)}
	var kept []string
	for _, p := range strings.Split(raw, ";") {
		if k, v, ok := strings.Cut(p, "="); ok && strings.EqualFold(strings.TrimSpace(k), "EntityPath") {
			q.entity = strings.TrimSpace(v)
			continue
		}
		kept = append(kept, p)
	}
	if q.entity == "" {
		return nil, fmt.Errorf("%w: %s needs EntityPath=QUEUE (or TOPIC/Subscriptions/SUB): the entity whose $DeadLetterQueue to read", ErrBadURL, q.name)
	}
	c, err := azservicebus.NewClientFromConnectionString(strings.Join(kept, ";"), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadURL, q.name, err)
	}
	q.client = c
	return q, nil
}

func (q *sbQueue) Name() string { return "Service Bus " + q.entity + "/$DeadLetterQueue at " + q.name }

func (q *sbQueue) Close() error { return q.client.Close(context.Background()) }

// receiver is a receiver on the entity's dead-letter sub-queue.
func (q *sbQueue) receiver() (*azservicebus.Receiver, error) {
	opts := &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}
	if topic, sub, ok := strings.Cut(q.entity, "/Subscriptions/"); ok {
		return q.client.NewReceiverForSubscription(topic, sub, opts)
	}
	return q.client.NewReceiverForQueue(q.entity, opts)
}

func sbDeadLetter(m *azservicebus.ReceivedMessage) DeadLetter {
	h := make(map[string]string, len(m.ApplicationProperties))
	for k, v := range m.ApplicationProperties {
		h[k] = fmt.Sprint(v)
	}
	var id string
	if m.SequenceNumber != nil {
		id = strconv.FormatInt(*m.SequenceNumber, 10)
	}
	dl := deadLetterOf(id, h, m.Body)
	if dl.Reason == "" && m.DeadLetterReason != nil {
		dl.Reason = *m.DeadLetterReason // Service Bus's own (MaxDeliveryCountExceeded)
	}
	if dl.Error == "" && m.DeadLetterErrorDescription != nil {
		dl.Error = *m.DeadLetterErrorDescription
	}
	dl.Source = q0(m.DeadLetterSource)
	if e := h[servicebus.HeaderEntity]; e != "" {
		dl.Source = e
	}
	if m.EnqueuedTime != nil {
		dl.At = *m.EnqueuedTime
	}
	return dl
}

func q0(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// peekBatch is how many messages one peek asks for.
const peekBatch = 100

func (q *sbQueue) List(ctx context.Context, limit int) ([]DeadLetter, error) {
	r, err := q.receiver()
	if err != nil {
		return nil, err
	}
	defer r.Close(context.Background())
	var (
		out  []DeadLetter
		from int64
	)
	for limit <= 0 || len(out) < limit {
		n := peekBatch
		if limit > 0 {
			n = min(n, limit-len(out))
		}
		ms, err := r.PeekMessages(ctx, n, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
		if err != nil {
			return nil, fmt.Errorf("peek %s: %w", q.Name(), err)
		}
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			out = append(out, sbDeadLetter(m))
			if m.SequenceNumber != nil {
				from = *m.SequenceNumber + 1
			}
		}
	}
	return out, nil
}

// Replay receives the dead letters in PeekLock until it holds every one
// selected that a peek found, sends each selected one back to the queue or
// topic it came from with servicebus.Replay and completes it; every other
// one it received is abandoned.
func (q *sbQueue) Replay(ctx context.Context, ids []string, done func(DeadLetter, error)) error {
	present, err := q.List(ctx, 0)
	if err != nil {
		return err
	}
	want := idSet(ids)
	pending := map[string]bool{}
	for _, dl := range present {
		if want[dl.ID] {
			pending[dl.ID] = true
		}
	}
	if len(pending) == 0 {
		return nil
	}
	r, err := q.receiver()
	if err != nil {
		return err
	}
	defer r.Close(context.Background())
	topic, _, _ := strings.Cut(q.entity, "/Subscriptions/")
	s, err := q.client.NewSender(topic, nil)
	if err != nil {
		return err
	}
	defer s.Close(context.Background())
	var others []*azservicebus.ReceivedMessage
	defer func() {
		for _, m := range others {
			_ = r.AbandonMessage(context.Background(), m, nil) // its lock ends by itself otherwise
		}
	}()
	for len(pending) > 0 {
		ms, err := r.ReceiveMessages(ctx, peekBatch, nil)
		if err != nil {
			return fmt.Errorf("receive %s: %w", q.Name(), err)
		}
		for _, m := range ms {
			dl := sbDeadLetter(m)
			if !pending[dl.ID] {
				others = append(others, m)
				continue
			}
			delete(pending, dl.ID)
			err := servicebus.Replay(ctx, s, m)
			if err == nil {
				if err = r.CompleteMessage(ctx, m, nil); err != nil {
					err = fmt.Errorf("replayed, but not completed in the dead-letter queue (it would be replayed again): %w", err)
				}
			}
			done(dl, err)
		}
	}
	return nil
}

// Horizon: the entity's lock duration, MaxDeliveryCount and message TTL
// are read with the administration API, which this command does not
// carry (nor does the in-process servicebustest serve it).
func (q *sbQueue) Horizon(context.Context) ([]Span, []error, error) {
	return nil, []error{fmt.Errorf("%w: %s: lock duration × MaxDeliveryCount and the default message TTL are entity properties of the "+
		"administration API; read them (az servicebus queue show) and pass the longest as --redelivery-horizon", ErrNotReadable, q.entity)}, nil
}

var _ Horizoner = (*sbQueue)(nil)
