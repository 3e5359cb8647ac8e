package dlq

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/idemgo/idem/broker/servicebus"
)

// sbQueue reads an entity's $DeadLetterQueue: List peeks (no lock, no
// delivery counted); Replay receives in PeekLock, replays and completes
// the selected dead letters and abandons the others it received.
type sbQueue struct {
	client *azservicebus.Client
	conn   string // the connection string without EntityPath
	name   string
	entity string // queue, or TOPIC/Subscriptions/SUB
}

// OpenServiceBus opens a Service Bus connection string with
// EntityPath=QUEUE (or TOPIC/Subscriptions/SUB): that entity's
// $DeadLetterQueue. u is not read.
func OpenServiceBus(_ context.Context, _ *url.URL, raw string) (Queue, error) {
	q := &sbQueue{name: Redact(raw)}
	vals, conn := cutKeys(raw, "entitypath")
	if q.entity = vals["entitypath"]; q.entity == "" {
		return nil, fmt.Errorf("%w: %s needs EntityPath=QUEUE (or TOPIC/Subscriptions/SUB): the entity whose $DeadLetterQueue to read", ErrBadURL, q.name)
	}
	q.conn = conn
	c, err := azservicebus.NewClientFromConnectionString(q.conn, nil)
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

// Horizon reads the entity's lock duration, MaxDeliveryCount and default
// message TTL with the administration API. A server without it (the
// in-process servicebustest, an emulator) is a note: pass the numbers as
// --redelivery-horizon. A dead-letter queue's messages never expire.
func (q *sbQueue) Horizon(ctx context.Context) ([]Span, []error, error) {
	dead := Span{What: q.entity + "/$DeadLetterQueue: dead letters never expire", Unbounded: true, DeadLetters: true}
	p, err := q.entityProperties(ctx)
	if err != nil {
		return []Span{dead}, []error{fmt.Errorf("%w: %s: lock duration, MaxDeliveryCount and the default message TTL come from the administration API, which answered %v; "+
			"read them (az servicebus queue show) and pass the longest as --redelivery-horizon", ErrNotReadable, q.entity, err)}, nil
	}
	spans, err := sbSpans(q.entity, p)
	return append(spans, dead), nil, err
}

// sbProperties are the entity properties that bound redelivery, as the
// administration API returns them (ISO 8601 durations).
type sbProperties struct {
	LockDuration, DefaultMessageTimeToLive *string
	MaxDeliveryCount                       *int32
}

func (q *sbQueue) entityProperties(ctx context.Context) (sbProperties, error) {
	ac, err := admin.NewClientFromConnectionString(q.conn, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{
		Retry: policy.RetryOptions{MaxRetries: -1}}}) // an operator's tool: one answer, not a minute of retries
	if err != nil {
		return sbProperties{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if topic, sub, ok := strings.Cut(q.entity, "/Subscriptions/"); ok {
		r, err := ac.GetSubscription(ctx, topic, sub, nil)
		if err != nil || r == nil {
			return sbProperties{}, errOr(err, "no such subscription")
		}
		return sbProperties{r.LockDuration, r.DefaultMessageTimeToLive, r.MaxDeliveryCount}, nil
	}
	r, err := ac.GetQueue(ctx, q.entity, nil)
	if err != nil || r == nil {
		return sbProperties{}, errOr(err, "no such queue")
	}
	return sbProperties{r.LockDuration, r.DefaultMessageTimeToLive, r.MaxDeliveryCount}, nil
}

func errOr(err error, msg string) error {
	if err != nil {
		return err
	}
	return errors.New(msg)
}

// sbSpans: the redelivery budget is MaxDeliveryCount locks run out
// (each a lock duration), the message TTL how long a message waits to be
// received at all (Service Bus's largest TimeSpan means none).
func sbSpans(entity string, p sbProperties) ([]Span, error) {
	lock, err := isoDuration(deref(p.LockDuration, "PT1M"))
	if err != nil {
		return nil, err
	}
	n := int32(10)
	if p.MaxDeliveryCount != nil {
		n = *p.MaxDeliveryCount
	}
	ttl, err := isoDuration(deref(p.DefaultMessageTimeToLive, "P10675199DT2H48M5.4775807S"))
	if err != nil {
		return nil, err
	}
	return []Span{
		{What: fmt.Sprintf("%s: MaxDeliveryCount %d × LockDuration %v", entity, n, lock), Duration: time.Duration(n) * lock, Budget: true},
		{What: entity + ": DefaultMessageTimeToLive", Duration: ttl, Unbounded: ttl >= 10000*24*time.Hour},
	}, nil
}

func deref(s *string, def string) string {
	if s == nil || *s == "" {
		return def
	}
	return *s
}

// isoDuration parses the ISO 8601 durations Service Bus uses: P[nD][T[nH][nM][n.nS]].
func isoDuration(s string) (time.Duration, error) {
	bad := fmt.Errorf("%w: duration %q is not ISO 8601 (PnDTnHnMnS)", ErrNotReadable, s)
	rest, ok := strings.CutPrefix(strings.ToUpper(s), "P")
	if !ok || rest == "" || strings.HasSuffix(rest, "T") {
		return 0, bad
	}
	var total float64
	inTime := false
	for rest != "" {
		if rest[0] == 'T' {
			inTime, rest = true, rest[1:]
			continue
		}
		i := strings.IndexAny(rest, "DHMS")
		if i <= 0 {
			return 0, bad
		}
		v, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return 0, bad
		}
		unit := map[byte]float64{'D': 24 * 3600, 'H': 3600, 'M': 60, 'S': 1}[rest[i]]
		if (rest[i] == 'D') == inTime {
			return 0, bad
		}
		total += v * unit
		rest = rest[i+1:]
	}
	if total*float64(time.Second) > float64(1<<63-1) {
		return time.Duration(1<<63 - 1), nil
	}
	return time.Duration(total * float64(time.Second)), nil
}
