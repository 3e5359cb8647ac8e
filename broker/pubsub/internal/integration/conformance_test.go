package integration_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/brokertest"
	pubsubidem "github.com/idemgo/idem/broker/pubsub"
	"github.com/idemgo/idem/internal/consumetest"
)

// TestConformance runs broker/brokertest on pstest, the client library's
// in-process Pub/Sub server: a topic and a subscription per case, the
// subscription with a dead-letter policy forwarding to the dead-letter
// topic the consumers publish to, each consumer on a client (a gRPC
// connection) of its own so that Kill cuts it off alone.
func TestConformance(t *testing.T) {
	t.Parallel() // beside TestConformanceExactlyOnce: each case has a server of its own
	brokertest.Run(t, func(t *testing.T) brokertest.Broker { return newBroker(t, false) })
}

// TestConformanceExactlyOnce runs the suite on subscriptions with
// exactly-once delivery: the client then waits for Pub/Sub's answer to
// every ack and nack (AckWithResult), which pstest gives (it models the
// confirmation, not a refused ack: see TestExactlyOnceAckRefused).
func TestConformanceExactlyOnce(t *testing.T) {
	t.Parallel()
	brokertest.Run(t, func(t *testing.T) brokertest.Broker { return newBroker(t, true) })
}

// testDeadline is the ack deadline the consumers' clients ask for and
// extend (ReceiveSettings Min and MaxDurationPerAckExtension): short, so
// that a killed consumer's messages come back soon, and above 5s, when
// the client sends its first extension (half its 10s minimum, whatever
// the deadline): with 2s, held messages came back while held and
// Pub/Sub's policy forwarded them during StoreOutage.
const testDeadline = 7 * time.Second

const project = "idem-test"

type psBroker struct {
	t    *testing.T
	srv  *pstest.Server
	eod  bool
	cl   *pubsub.Client // the publisher's and the dead-letter reader's
	pub  *pubsub.Publisher
	down sync.WaitGroup

	mu       sync.Mutex
	dls      []*pubsub.Message    // every dead letter read
	read     map[string]time.Time // when each was read, by its message id
	settled  map[string]bool      // originals whose dead-letter report the hooks saw, by server id
	replayed int                  // dls[:replayed] are replayed
}

// settleGrace bounds how long DeadLetters keeps back a dead letter whose
// consumer's report has not come (a consumer killed between the two).
const settleGrace = 3 * time.Second

const (
	topicName = "projects/" + project + "/topics/orders"
	subName   = "projects/" + project + "/subscriptions/orders-billing"
	dlqName   = "projects/" + project + "/topics/orders-dlq"
	dlqSub    = "projects/" + project + "/subscriptions/orders-dlq-reader"
)

// newServer starts a pstest server for t, closed at its end.
func newServer(t *testing.T) *pstest.Server {
	t.Helper()
	srv := pstest.NewServer()
	t.Cleanup(func() { srv.Close() })
	return srv
}

// newClient is a client of its own on srv.
func newClient(t *testing.T, srv *pstest.Server) *pubsub.Client {
	t.Helper()
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c, err := pubsub.NewClient(context.Background(), project, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// setup creates the topics and the subscriptions: orders-billing on
// orders, dead-lettering to orders-dlq at maxAttempts (Pub/Sub's own
// forwarding, without idem's attributes), with exactly-once delivery as
// eod says; and a reader of orders-dlq.
func setup(t *testing.T, cl *pubsub.Client, eod bool, maxAttempts int32) {
	t.Helper()
	ctx := context.Background()
	for _, name := range []string{topicName, dlqName} {
		if _, err := cl.TopicAdminClient.CreateTopic(ctx, &pb.Topic{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*pb.Subscription{
		{Name: subName, Topic: topicName, AckDeadlineSeconds: 10, EnableExactlyOnceDelivery: eod,
			DeadLetterPolicy: &pb.DeadLetterPolicy{DeadLetterTopic: dlqName, MaxDeliveryAttempts: maxAttempts}},
		{Name: dlqSub, Topic: dlqName, AckDeadlineSeconds: 10},
	} {
		if _, err := cl.SubscriptionAdminClient.CreateSubscription(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
}

// defaultAttempts is the dead-letter policy's MaxDeliveryAttempts until a
// consumer asks for another: Pub/Sub's largest.
const defaultAttempts = 100

func newBroker(t *testing.T, eod bool) *psBroker {
	srv := newServer(t)
	b := &psBroker{t: t, srv: srv, eod: eod, cl: newClient(t, srv), read: map[string]time.Time{}, settled: map[string]bool{}}
	setup(t, b.cl, eod, defaultAttempts)
	b.pub = b.cl.Publisher(topicName)
	t.Cleanup(func() {
		b.down.Wait()
		b.pub.Stop()
		b.cl.Close()
	})
	return b
}

// Features: the dead-letter policy counts deliveries (DeliveryAttempt)
// toward its MaxDeliveryAttempts, set to the consumer's MaxDeliveries; a
// killed consumer's messages come back once their deadline passes.
func (b *psBroker) Features() brokertest.Features {
	return brokertest.Features{DeliveryLimit: true, Redelivery: testDeadline, Skip: map[string]string{
		"OrderKept": "handlers run concurrently and a retry is a nack: no order is kept (ordering keys order the client's callbacks, not the handlers)",
	}}
}

func (b *psBroker) Publish(ctx context.Context, msgs ...brokertest.Message) error {
	rs := make([]*pubsub.PublishResult, len(msgs))
	for i, m := range msgs {
		attrs := map[string]string{}
		for k, v := range m.Headers {
			attrs[k] = v
		}
		pm := &pubsub.Message{Data: m.Payload, Attributes: attrs}
		if m.ID == "" {
			rs[i] = b.pub.Publish(ctx, pm)
		} else {
			rs[i] = pubsubidem.Publish(ctx, b.pub, m.ID, pm)
		}
	}
	for _, r := range rs {
		if _, err := r.Get(ctx); err != nil {
			return err
		}
	}
	return nil
}

// DeadLetters pulls what reached the dead-letter topic since the last
// call (acking it) and returns every dead letter read, each of a
// consumer's once the hooks saw its report (or settleGrace after it was
// read). The suite takes a dead letter's presence as the end of its
// delivery, but with exactly-once delivery the consumer publishes it and
// then waits for its original's ack to be confirmed (the client sends acks
// every 100ms) before the report: the cases' outcome counts would race
// that wait.
func (b *psBroker) DeadLetters(ctx context.Context) ([]brokertest.DeadLetter, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		res, err := b.cl.SubscriptionAdminClient.Pull(ctx, &pb.PullRequest{Subscription: dlqSub, MaxMessages: 100, ReturnImmediately: true})
		if err != nil {
			return nil, err
		}
		if len(res.ReceivedMessages) == 0 {
			break
		}
		ids := make([]string, len(res.ReceivedMessages))
		for i, rm := range res.ReceivedMessages {
			ids[i] = rm.AckId
			b.dls = append(b.dls, &pubsub.Message{ID: rm.Message.MessageId, Data: rm.Message.Data, Attributes: rm.Message.Attributes})
			b.read[rm.Message.MessageId] = time.Now()
		}
		if err := b.cl.SubscriptionAdminClient.Acknowledge(ctx, &pb.AcknowledgeRequest{Subscription: dlqSub, AckIds: ids}); err != nil {
			return nil, err
		}
	}
	out := make([]brokertest.DeadLetter, 0, len(b.dls))
	for _, m := range b.dls {
		_, idems := m.Attributes[idem.HeaderReason]
		if idems && !b.settled[m.Attributes[pubsubidem.HeaderPosition]] && time.Since(b.read[m.ID]) < settleGrace {
			continue
		}
		// pstest forwards under the dead-letter policy without Pub/Sub's
		// CloudPubSubDeadLetterSource* attributes: DeadLetterOf reads those
		// all the same, and says it cannot tell them from plain messages.
		im, err := pubsubidem.DeadLetterOf(m)
		if err != nil && idems {
			return nil, err
		}
		out = append(out, brokertest.DeadLetter{ID: im.ID, Payload: im.Payload, Headers: im.Headers})
	}
	return out, nil
}

// Replay replays, with pubsubidem.Replay, the dead letters DeadLetters
// has read and Replay has not.
func (b *psBroker) Replay(ctx context.Context) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for ; b.replayed < len(b.dls); b.replayed++ {
		if err := pubsubidem.Replay(ctx, b.pub, b.dls[b.replayed]); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// suiteConcurrency is the consumers' Concurrency where a case leaves it
// to the adapter: with exactly-once delivery each ack waits for Pub/Sub's
// answer, and the client sends acks every 100ms, so one worker settles
// about ten messages a second.
const suiteConcurrency = 8

// Start runs a consumer on a client of its own; Kill closes the client,
// leaving its messages outstanding until their deadline passes. Its
// client keeps the default MaxOutstandingMessages (1000), above what any
// case publishes: pstest does not apply that limit (it pushes every
// message and starts its deadline while the client, at its limit, never
// reads it), so a case with more messages than the limit would see, during
// StoreOutage, attempts spent and messages forwarded by the dead-letter
// policy that real Pub/Sub, which applies flow control on the server,
// would never have sent; StoreOutage asserts no dead letter, which holds
// here because every message it publishes is held by the consumer, whose
// deadlines the client keeps alive (TestOutageKeepsHeldDeadlines). A
// consumer with MaxDeliveries sets the dead-letter policy's
// MaxDeliveryAttempts to it, the way a user sets MaxDeliveries to the
// policy's.
func (b *psBroker) Start(ctx context.Context, sc brokertest.Consumer) (brokertest.Running, error) {
	if sc.MaxDeliveries > 0 {
		if err := setMaxAttempts(ctx, b.cl, sc.MaxDeliveries); err != nil {
			return nil, err
		}
	}
	cl := newClient(b.t, b.srv)
	sub := cl.Subscriber(subName)
	sub.ReceiveSettings.MinDurationPerAckExtension = testDeadline
	sub.ReceiveSettings.MaxDurationPerAckExtension = testDeadline
	dl := cl.Publisher(dlqName)
	concurrency := sc.Concurrency
	if concurrency == 0 {
		concurrency = suiteConcurrency
	}
	hooks := consumetest.Hooks(sc.Hooks, pubsubidem.MessageOf)
	after := hooks.AfterSettle
	hooks.AfterSettle = func(ctx context.Context, m *pubsubidem.Message, r broker.Report) {
		if after != nil {
			after(ctx, m, r)
		}
		if r.Action == idem.ActionDeadLetter && r.BrokerErr == nil {
			b.mu.Lock()
			b.settled[m.ID] = true
			b.mu.Unlock()
		}
	}
	c, err := pubsubidem.NewConsumer(sub, sc.Guard, consumetest.SuiteHandler(sc, pubsubidem.MessageOf), pubsubidem.Options{
		Concurrency: concurrency, Backoff: consumetest.Backoff(sc), MaxDeliveries: sc.MaxDeliveries,
		Hooks:      hooks,
		DeadLetter: dl,
	})
	if err != nil {
		cl.Close()
		return nil, err
	}
	return consumetest.Start(&b.down, c.Run, func() error { dl.Stop(); return cl.Close() }, func() { cl.Close() }), nil
}

// setMaxAttempts sets the subscription's dead-letter policy's
// MaxDeliveryAttempts.
func setMaxAttempts(ctx context.Context, cl *pubsub.Client, n int) error {
	_, err := cl.SubscriptionAdminClient.UpdateSubscription(ctx, &pb.UpdateSubscriptionRequest{
		Subscription: &pb.Subscription{Name: subName,
			DeadLetterPolicy: &pb.DeadLetterPolicy{DeadLetterTopic: dlqName, MaxDeliveryAttempts: int32(n)}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"dead_letter_policy"}},
	})
	return err
}
