package dlq

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pubsubidem "github.com/idemgo/idem/broker/pubsub"
)

// psQueue reads a subscription of the dead-letter topic with unary pulls:
// it pulls every message the subscription holds, then gives each one it
// does not replay back at once (ModifyAckDeadline 0, a nack), as the
// Cloud console's "pull" does without acking. Replay publishes a selected
// one to its original topic with pubsubidem.Replay and acks it.
type psQueue struct {
	client  *pubsub.Client
	project string
	dlq     string // the dead-letter reader subscription's full name
	sub     string // the consumed subscription's, for Horizon and the replay topic
	topic   string // where replays go when a dead letter does not say

	mu   sync.Mutex
	pubs map[string]*pubsub.Publisher
}

// psHold is the ack deadline a read holds the messages it pulled for
// (seconds) before it gives them back.
const psHold = 60

// OpenPubSub opens pubsub://PROJECT?dlq=SUB[&subscription=S][&topic=T]:
// SUB is a subscription of the dead-letter topic (the consumers'
// Options.DeadLetter, or the dead-letter policy's topic), S the consumed
// subscription (Horizon; its topic is where a dead letter Pub/Sub
// forwarded itself goes back to), T that topic named outright. Names are
// short or full (projects/P/subscriptions/S). The client finds
// credentials as Google's libraries do (Application Default
// Credentials), or talks to an emulator at $PUBSUB_EMULATOR_HOST.
func OpenPubSub(ctx context.Context, u *url.URL, _ string) (Queue, error) {
	params := u.Query()
	project := u.Host
	if project == "" {
		return nil, fmt.Errorf("%w: %s names no project: pubsub://PROJECT?dlq=SUBSCRIPTION", ErrBadURL, u.Redacted())
	}
	q := &psQueue{project: project, pubs: map[string]*pubsub.Publisher{},
		dlq: fullName(project, "subscriptions", params.Get("dlq")), sub: fullName(project, "subscriptions", params.Get("subscription")),
		topic: fullName(project, "topics", params.Get("topic"))}
	if q.dlq == "" && q.sub == "" {
		return nil, fmt.Errorf("%w: %s needs ?dlq=SUBSCRIPTION (a subscription of the dead-letter topic)", ErrBadURL, u.Redacted())
	}
	c, err := pubsub.NewClient(ctx, project)
	if err != nil {
		return nil, fmt.Errorf("Pub/Sub client for project %s: %w", project, err)
	}
	q.client = c
	return q, nil
}

// fullName is projects/PROJECT/KIND/NAME, unless name is one already.
func fullName(project, kind, name string) string {
	if name == "" || strings.HasPrefix(name, "projects/") {
		return name
	}
	return "projects/" + project + "/" + kind + "/" + name
}

func (q *psQueue) Name() string { return "Pub/Sub subscription " + q.dlq }

func (q *psQueue) Close() error {
	q.mu.Lock()
	for _, p := range q.pubs {
		p.Stop()
	}
	q.mu.Unlock()
	return q.client.Close()
}

// pull is every message the dead-letter subscription holds, oldest
// published first, pulled and held for psHold; give back what is not
// acked.
func (q *psQueue) pull(ctx context.Context) ([]*pb.ReceivedMessage, error) {
	if q.dlq == "" {
		return nil, fmt.Errorf("%w: no ?dlq=SUBSCRIPTION (a subscription of the dead-letter topic)", ErrBadURL)
	}
	var (
		out  []*pb.ReceivedMessage
		seen = map[string]bool{}
	)
	for last := false; ; {
		req := &pb.PullRequest{Subscription: q.dlq, MaxMessages: 1000, ReturnImmediately: !last}
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if last {
			// The last pull waits a moment: an immediate one can come back
			// empty while Pub/Sub still holds messages.
			pctx, cancel = context.WithTimeout(ctx, 2*time.Second)
		}
		resp, err := q.client.SubscriptionAdminClient.Pull(pctx, req)
		cancel()
		if last && (errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded) && ctx.Err() == nil {
			err, resp = nil, &pb.PullResponse{}
		}
		if err != nil {
			q.giveBack(ctx, out)
			return nil, fmt.Errorf("pull %s: %w", q.dlq, err)
		}
		var ids []string
		for _, m := range resp.ReceivedMessages {
			ids = append(ids, m.AckId)
			if !seen[m.Message.GetMessageId()] {
				seen[m.Message.GetMessageId()] = true
				out = append(out, m)
			}
		}
		if len(ids) > 0 {
			_ = q.client.SubscriptionAdminClient.ModifyAckDeadline(ctx, &pb.ModifyAckDeadlineRequest{Subscription: q.dlq, AckIds: ids, AckDeadlineSeconds: psHold})
		}
		switch {
		case len(resp.ReceivedMessages) > 0:
			last = false
		case last:
			sortByPublishTime(out)
			return out, nil
		default:
			last = true
		}
	}
}

func sortByPublishTime(ms []*pb.ReceivedMessage) {
	for i := 1; i < len(ms); i++ { // few, and mostly in order already
		for j := i; j > 0 && ms[j].Message.GetPublishTime().AsTime().Before(ms[j-1].Message.GetPublishTime().AsTime()); j-- {
			ms[j], ms[j-1] = ms[j-1], ms[j]
		}
	}
}

// giveBack nacks ms: Pub/Sub delivers them again at once.
func (q *psQueue) giveBack(ctx context.Context, ms []*pb.ReceivedMessage) {
	if len(ms) == 0 {
		return
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.AckId
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = q.client.SubscriptionAdminClient.ModifyAckDeadline(bctx, &pb.ModifyAckDeadlineRequest{Subscription: q.dlq, AckIds: ids, AckDeadlineSeconds: 0})
}

func psDeadLetter(m *pb.ReceivedMessage) DeadLetter {
	msg := m.Message
	h := make(map[string]string, len(msg.GetAttributes()))
	for k, v := range msg.GetAttributes() {
		h[k] = v
	}
	dl := deadLetterOf(msg.GetMessageId(), h, msg.GetData())
	dl.Source = h[pubsubidem.HeaderSubscription]
	if dl.Source == "" {
		dl.Source = h["CloudPubSubDeadLetterSourceSubscription"]
	}
	if dl.Reason == "" {
		// Pub/Sub forwarded it itself, at the dead-letter policy's
		// MaxDeliveryAttempts: none of idem's attributes.
		dl.Reason = pubsubidem.ReasonMaxDeliver
	}
	if t := msg.GetPublishTime(); t != nil {
		dl.At = t.AsTime()
	}
	return dl
}

func (q *psQueue) List(ctx context.Context, limit int) ([]DeadLetter, error) {
	ms, err := q.pull(ctx)
	if err != nil {
		return nil, err
	}
	defer q.giveBack(ctx, ms)
	if limit > 0 && len(ms) > limit {
		ms = ms[:limit]
	}
	out := make([]DeadLetter, len(ms))
	for i, m := range ms {
		out[i] = psDeadLetter(m)
	}
	return out, nil
}

// Replay publishes each selected dead letter to the topic of the
// subscription it came from (Idem-Subscription, or Pub/Sub's
// CloudPubSubDeadLetterSourceSubscription, else ?subscription= or
// ?topic=) with pubsubidem.Replay, and acks it.
func (q *psQueue) Replay(ctx context.Context, ids []string, done func(DeadLetter, error)) error {
	ms, err := q.pull(ctx)
	if err != nil {
		return err
	}
	want := idSet(ids)
	var back []*pb.ReceivedMessage
	defer func() { q.giveBack(ctx, back) }()
	for _, m := range ms {
		dl := psDeadLetter(m)
		if !want[dl.ID] {
			back = append(back, m)
			continue
		}
		err := q.replayOne(ctx, m, dl)
		if err == nil {
			if err = q.client.SubscriptionAdminClient.Acknowledge(ctx, &pb.AcknowledgeRequest{Subscription: q.dlq, AckIds: []string{m.AckId}}); err != nil {
				err = fmt.Errorf("replayed, but not acked in %s (it would be replayed again): %w", q.dlq, err)
			}
		} else {
			back = append(back, m)
		}
		done(dl, err)
	}
	return nil
}

func (q *psQueue) replayOne(ctx context.Context, m *pb.ReceivedMessage, dl DeadLetter) error {
	topic, err := q.replayTopic(ctx, dl.Source)
	if err != nil {
		return err
	}
	msg := &pubsub.Message{ID: m.Message.GetMessageId(), Data: m.Message.GetData(), Attributes: m.Message.GetAttributes(),
		OrderingKey: m.Message.GetOrderingKey()}
	return pubsubidem.Replay(ctx, q.publisher(topic, dl.Headers[pubsubidem.HeaderOrderingKey] != ""), msg)
}

// replayTopic is the topic a dead letter from source goes back to: the
// topic of that subscription, else the URL's.
func (q *psQueue) replayTopic(ctx context.Context, source string) (string, error) {
	if q.topic != "" {
		return q.topic, nil
	}
	if source == "" {
		source = q.sub
	}
	if source == "" {
		return "", errors.New("the dead letter names no subscription it came from (Pub/Sub forwarded it itself): add ?subscription=S or ?topic=T to the URL")
	}
	s, err := q.client.SubscriptionAdminClient.GetSubscription(ctx, &pb.GetSubscriptionRequest{Subscription: source})
	if err != nil {
		return "", fmt.Errorf("subscription %s, where the dead letter came from: %w", source, err)
	}
	return s.GetTopic(), nil
}

// publisher is one publisher per topic (ordered where a dead letter had an
// ordering key), kept until Close.
func (q *psQueue) publisher(topic string, ordered bool) *pubsub.Publisher {
	q.mu.Lock()
	defer q.mu.Unlock()
	key := fmt.Sprint(topic, ordered)
	p := q.pubs[key]
	if p == nil {
		p = q.client.Publisher(topic)
		p.EnableMessageOrdering = ordered
		q.pubs[key] = p
	}
	return p
}

// Horizon reads the consumed subscription's message retention, ack
// deadline and dead-letter policy (its redelivery budget), and the
// dead-letter subscription's message retention.
func (q *psQueue) Horizon(ctx context.Context) ([]Span, []error, error) {
	var (
		spans []Span
		notes []error
	)
	for _, s := range []struct {
		name string
		dead bool
	}{{q.sub, false}, {q.dlq, true}} {
		if s.name == "" {
			continue
		}
		sub, err := q.client.SubscriptionAdminClient.GetSubscription(ctx, &pb.GetSubscriptionRequest{Subscription: s.name})
		if err != nil {
			return nil, nil, fmt.Errorf("subscription %s: %w", s.name, err)
		}
		what := "subscription " + s.name
		if s.dead {
			what = "dead-letter subscription " + s.name
		}
		keep := 7 * 24 * time.Hour // Pub/Sub's default
		if d := sub.GetMessageRetentionDuration(); d != nil {
			keep = d.AsDuration()
		}
		spans = append(spans, Span{What: what + ": message retention (unacked messages kept; a seek to a time reads acked ones again when retain_acked_messages is set)", Duration: keep, DeadLetters: s.dead})
		if s.dead {
			continue
		}
		deadline := time.Duration(sub.GetAckDeadlineSeconds()) * time.Second
		if p := sub.GetDeadLetterPolicy(); p != nil && p.GetMaxDeliveryAttempts() > 0 {
			n := p.GetMaxDeliveryAttempts()
			spans = append(spans, Span{What: fmt.Sprintf("%s: dead-letter policy MaxDeliveryAttempts %d × ack deadline %v", what, n, deadline),
				Duration: time.Duration(n) * deadline, Budget: true})
		} else {
			notes = append(notes, fmt.Errorf("%w: %s has no dead-letter policy: Pub/Sub redelivers a message until its retention ends (the consumer's MaxDeliveries bounds it)", ErrNotReadable, what))
		}
	}
	return spans, notes, nil
}

var _ Horizoner = (*psQueue)(nil)
