package main

import (
	"context"
	"net/url"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	pubsubidem "github.com/idemgo/idem/broker/pubsub"
	sqsidem "github.com/idemgo/idem/broker/sqs"
	"github.com/idemgo/idem/broker/sqs/sqstest"
)

// sqsDLQ: sqstest in-process, a queue and its dead-letter queue.
type sqsDLQ struct {
	srv        *sqstest.Server
	client     *sqs.Client
	queue, dlq string // URLs
}

func newSQSDLQ(t *testing.T) *sqsDLQ {
	srv, err := sqstest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	b := &sqsDLQ{srv: srv, client: sqs.New(sqs.Options{Region: sqstest.Region, BaseEndpoint: aws.String(srv.URL()), Credentials: aws.AnonymousCredentials{}})}
	for name, u := range map[string]*string{"orders": &b.queue, "orders-dlq": &b.dlq} {
		out, err := b.client.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(name),
			Attributes: map[string]string{"VisibilityTimeout": "5"}})
		if err != nil {
			t.Fatal(err)
		}
		*u = aws.ToString(out.QueueUrl)
	}
	return b
}

// url names the dead-letter queue by name, as an operator would: the tool
// asks the endpoint for its URL.
func (b *sqsDLQ) url() string {
	u, _ := url.Parse(b.srv.URL())
	return "sqs://" + u.Host + "?dlq=orders-dlq"
}
func (b *sqsDLQ) keepsReplayed() bool { return false }

func (b *sqsDLQ) publish(t *testing.T, key, body string) {
	if _, err := sqsidem.Send(context.Background(), b.client, key, &sqs.SendMessageInput{QueueUrl: aws.String(b.queue), MessageBody: aws.String(body)}); err != nil {
		t.Fatal(err)
	}
}

func (b *sqsDLQ) consume(ctx context.Context, t *testing.T, store idem.Store, h func(key, body string) error, ev *dlqEvents) error {
	g, err := sqsidem.NewGuard(store, b.queue, idem.Options{KeepPayload: 1024})
	if err != nil {
		return err
	}
	return sqsidem.Consume(ctx, b.client, g, sqsidem.Handle(func(_ context.Context, m *types.Message) ([]byte, error) {
		im := sqsidem.MessageOf(m)
		return nil, h(im.ID, string(im.Payload))
	}), sqsidem.Options{QueueURL: b.queue, DeadLetterQueueURL: b.dlq, WaitTime: time.Second,
		Backoff: fast, Hooks: dlqHooks[*types.Message](ev)})
}

// psDLQ: pstest in-process, reached as an emulator through
// PUBSUB_EMULATOR_HOST (as idem dlq reaches one): a topic, its
// subscription, the dead-letter topic and a subscription that reads it.
type psDLQ struct {
	client *pubsub.Client
	pub    *pubsub.Publisher
}

const psProject = "idem-test"

func newPubSubDLQ(t *testing.T) *psDLQ {
	srv := pstest.NewServer()
	t.Cleanup(func() { srv.Close() })
	t.Setenv("PUBSUB_EMULATOR_HOST", srv.Addr)
	ctx := context.Background()
	client, err := pubsub.NewClient(ctx, psProject)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	name := func(kind, n string) string { return "projects/" + psProject + "/" + kind + "/" + n }
	for _, topic := range []string{"orders", "orders-dlq"} {
		if _, err := client.TopicAdminClient.CreateTopic(ctx, &pb.Topic{Name: name("topics", topic)}); err != nil {
			t.Fatal(err)
		}
	}
	for sub, topic := range map[string]string{"orders-billing": "orders", "orders-dlq-reader": "orders-dlq"} {
		if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pb.Subscription{Name: name("subscriptions", sub),
			Topic: name("topics", topic), AckDeadlineSeconds: 10}); err != nil {
			t.Fatal(err)
		}
	}
	b := &psDLQ{client: client, pub: client.Publisher("orders")}
	t.Cleanup(b.pub.Stop)
	return b
}

func (b *psDLQ) url() string         { return "pubsub://" + psProject + "?dlq=orders-dlq-reader" }
func (b *psDLQ) keepsReplayed() bool { return false }

func (b *psDLQ) publish(t *testing.T, key, body string) {
	ctx := context.Background()
	if _, err := pubsubidem.Publish(ctx, b.pub, key, &pubsub.Message{Data: []byte(body)}).Get(ctx); err != nil {
		t.Fatal(err)
	}
}

func (b *psDLQ) consume(ctx context.Context, t *testing.T, store idem.Store, h func(key, body string) error, ev *dlqEvents) error {
	sub := b.client.Subscriber("orders-billing")
	g, err := pubsubidem.NewGuard(store, sub, idem.Options{KeepPayload: 1024})
	if err != nil {
		return err
	}
	dead := b.client.Publisher("orders-dlq")
	defer dead.Stop()
	return pubsubidem.Consume(ctx, sub, g, broker.Handle(func(_ context.Context, m *pubsubidem.Message) ([]byte, error) {
		im := pubsubidem.MessageOf(m)
		return nil, h(im.ID, string(im.Payload))
	}), pubsubidem.Options{DeadLetter: dead, Backoff: fast, Hooks: dlqHooks[*pubsubidem.Message](ev)})
}
