package demo

import (
	"context"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pubsubidem "github.com/idemgo/idem/broker/pubsub"
)

// PubSub is an in-process Google Cloud Pub/Sub (pstest, the client
// library's own) through the real client over gRPC: a topic of orders
// with a subscription per consumer group, and a dead-letter topic. The
// consumers pull (unary Pull) and set each message's ack deadline to
// AckWait, so a crashed consumer's messages come back after it; a retry
// is a ModifyAckDeadline of the delay. The producer is
// pubsubidem.Publish (Pub/Sub deduplicates nothing: producer retries
// reach the consumers).
var PubSub = &Broker{name: "pubsub", inProcess: true, start: func(ctx context.Context, cfg Config, runID string) (transport, error) {
	return startPubSub(ctx, cfg)
}}

const psProject = "idem-demo"

type psBroker struct {
	srv      *pstest.Server
	client   *pubsub.Client
	orders   *pubsub.Publisher
	dlq      *pubsub.Publisher
	deadline int32 // seconds a pulled message stays with its consumer
}

func startPubSub(ctx context.Context, cfg Config) (_ *psBroker, err error) {
	b := &psBroker{srv: pstest.NewServer(), deadline: int32(max(1, (cfg.AckWait+time.Second-1)/time.Second))}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	conn, err := grpc.NewClient(b.srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("%w: in-process Pub/Sub: %v", ErrBroker, err)
	}
	if b.client, err = pubsub.NewClient(ctx, psProject, option.WithGRPCConn(conn)); err != nil {
		return nil, fmt.Errorf("%w: in-process Pub/Sub: %v", ErrBroker, err)
	}
	for _, topic := range []string{"orders", "orders-dlq"} {
		if _, err := b.client.TopicAdminClient.CreateTopic(ctx, &pb.Topic{Name: psName("topics", topic)}); err != nil {
			return nil, fmt.Errorf("%w: create topic %s: %v", ErrBroker, topic, err)
		}
	}
	for _, group := range []string{"idem", "naive"} {
		if _, err := b.client.SubscriptionAdminClient.CreateSubscription(ctx, &pb.Subscription{Name: psName("subscriptions", "orders-"+group),
			Topic: psName("topics", "orders"), AckDeadlineSeconds: 10}); err != nil {
			return nil, fmt.Errorf("%w: create subscription %s: %v", ErrBroker, group, err)
		}
	}
	b.orders, b.dlq = b.client.Publisher("orders"), b.client.Publisher("orders-dlq")
	return b, nil
}

func psName(kind, name string) string { return "projects/" + psProject + "/" + kind + "/" + name }

func (b *psBroker) name() string         { return "in-process Google Cloud Pub/Sub (pstest)" }
func (b *psBroker) lostAckCrashes() bool { return false }

func (b *psBroker) close() {
	for _, p := range []*pubsub.Publisher{b.orders, b.dlq} {
		if p != nil {
			p.Stop()
		}
	}
	if b.client != nil {
		b.client.Close()
	}
	b.srv.Close()
}

func (b *psBroker) publish(ctx context.Context, m message, seq uint64) error {
	_, err := pubsubidem.Publish(ctx, b.orders, m.Order.ID, &pubsub.Message{Data: m.payload(),
		Attributes: map[string]string{orderHeader: m.Order.ID, seqHeader: strconv.FormatUint(seq, 10), "Content-Type": "application/json"}}).Get(ctx)
	if err != nil {
		return fmt.Errorf("%w: publish %s: %v", ErrBroker, m.Order.ID, err)
	}
	return nil
}

func (b *psBroker) open(_ context.Context, group string) (session, error) {
	return &psSession{b: b, sub: psName("subscriptions", "orders-"+group)}, nil
}

type psSession struct {
	b   *psBroker
	sub string
}

// fetch pulls what the subscription has (pstest waits half a second when
// it has nothing) and gives each message the session's ack deadline.
func (s *psSession) fetch(ctx context.Context) iter.Seq[delivery] {
	return func(yield func(delivery) bool) {
		resp, err := s.b.client.SubscriptionAdminClient.Pull(ctx, &pb.PullRequest{Subscription: s.sub, MaxMessages: 16})
		if err != nil || len(resp.ReceivedMessages) == 0 {
			if err != nil {
				sleep(ctx, 50*time.Millisecond)
			}
			return
		}
		ids := make([]string, len(resp.ReceivedMessages))
		for i, m := range resp.ReceivedMessages {
			ids[i] = m.AckId
		}
		if err := s.b.client.SubscriptionAdminClient.ModifyAckDeadline(ctx, &pb.ModifyAckDeadlineRequest{Subscription: s.sub,
			AckIds: ids, AckDeadlineSeconds: s.b.deadline}); err != nil {
			return // the messages come back after the subscription's deadline
		}
		for _, m := range resp.ReceivedMessages {
			if !yield(&psDelivery{s: s, m: m, ctx: ctx}) {
				return
			}
		}
	}
}

func (s *psSession) close() {}

type psDelivery struct {
	s   *psSession
	m   *pb.ReceivedMessage
	ctx context.Context
}

func (d *psDelivery) seq() uint64  { return seqOf(d.m.Message.GetAttributes()[seqHeader]) }
func (d *psDelivery) data() []byte { return d.m.Message.GetData() }
func (d *psDelivery) key() string  { return d.m.Message.GetAttributes()[orderHeader] }

func (d *psDelivery) ack(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return d.s.b.client.SubscriptionAdminClient.Acknowledge(ctx, &pb.AcknowledgeRequest{Subscription: d.s.sub, AckIds: []string{d.m.AckId}})
}

// retry gives the message back after delay (whole seconds, as Pub/Sub
// counts ack deadlines: a shorter delay is none).
func (d *psDelivery) retry(delay time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.ctx), 2*time.Second)
	defer cancel()
	_ = d.s.b.client.SubscriptionAdminClient.ModifyAckDeadline(ctx, &pb.ModifyAckDeadlineRequest{Subscription: d.s.sub,
		AckIds: []string{d.m.AckId}, AckDeadlineSeconds: int32(delay / time.Second)})
}

func (d *psDelivery) deadLetter(ctx context.Context, reason string, cause error) error {
	attrs := map[string]string{"Idem-Reason": reason, "Idem-Error": strings.ReplaceAll(cause.Error(), "\n", " ")}
	for k, v := range d.m.Message.GetAttributes() {
		attrs[k] = v
	}
	if _, err := d.s.b.dlq.Publish(ctx, &pubsub.Message{Data: d.m.Message.GetData(), Attributes: attrs}).Get(ctx); err != nil {
		return err
	}
	return d.ack(ctx)
}
