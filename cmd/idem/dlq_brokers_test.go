package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/broker/eventhubs"
	"github.com/idemgo/idem/broker/eventhubs/eventhubstest"
	"github.com/idemgo/idem/broker/kafka"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/broker/servicebus"
	"github.com/idemgo/idem/broker/servicebus/servicebustest"
	"github.com/idemgo/idem/internal/testenv"
)

func tag() string { return fmt.Sprintf("%d_%d", time.Now().UnixNano(), rand.Uint32()) }

// fast is the engine's back-off in these tests.
func fast(int) time.Duration { return 10 * time.Millisecond }

// dlqBrokers is every broker of the tools' tests, by its driver's kind:
// idem dlq, idem console --broker and idem doctor --broker run on each
// (TestDriversTested holds the table of drivers to it).
var dlqBrokers = []struct {
	kind string
	open func(t *testing.T) dlqBroker
}{
	{"nats", func(t *testing.T) dlqBroker { return newNATSDLQ(t) }},
	{"amqp", func(t *testing.T) dlqBroker { return newAMQPDLQ(t) }},
	{"kafka", func(t *testing.T) dlqBroker { return newKafkaDLQ(t) }},
	{"servicebus", func(t *testing.T) dlqBroker { return newServiceBusDLQ(t) }},
	{"eventhubs", func(t *testing.T) dlqBroker { return newEventHubsDLQ(t) }},
	{"redisstream", func(t *testing.T) dlqBroker { return newRedisDLQ(t) }},
	{"mqtt", func(t *testing.T) dlqBroker { return newMQTTDLQ(t) }},
	{"sqs", func(t *testing.T) dlqBroker { return newSQSDLQ(t) }},
	{"pubsub", func(t *testing.T) dlqBroker { return newPubSubDLQ(t) }},
}

// eachBroker runs f on every broker of dlqBrokers, as a subtest.
func eachBroker(t *testing.T, f func(t *testing.T, b dlqBroker)) {
	for _, b := range dlqBrokers {
		t.Run(b.kind, func(t *testing.T) { f(t, b.open(t)) })
	}
}

func TestDLQ(t *testing.T) { eachBroker(t, runDLQScenario) }

// Every driver of the table is tested on its broker.
func TestDriversTested(t *testing.T) {
	tested := map[string]bool{}
	for _, b := range dlqBrokers {
		tested[b.kind] = true
	}
	for _, d := range drivers {
		if !tested[d.kind] {
			t.Errorf("driver %s (%s) has no broker in dlqBrokers: idem dlq, console and doctor are not tested on it", d.kind, d.name)
		}
	}
}

// dlqHooks files a consumer's reports with ev.
func dlqHooks[M any](ev *dlqEvents) broker.Hooks[M] {
	return broker.Hooks[M]{
		OnDeadLetter: func(_ context.Context, _ M, r broker.Report) { ev.report(r, true) },
		AfterSettle:  func(_ context.Context, _ M, r broker.Report) { ev.report(r, false) },
	}
}

// natsDLQ: a stream ORDERS_<tag> with a durable consumer and JetStream's
// default two-minute duplicate window, and the stream ORDERS_<tag>_DLQ
// capturing its dead-letter subject, on the shared server.
type natsDLQ struct {
	addr, stream, subject, dlqSubject string
	js                                jetstream.JetStream
}

func newNATSDLQ(t *testing.T) *natsDLQ {
	addr := testenv.NATS.Need(t)
	nc, err := nats.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	id := tag()
	b := &natsDLQ{addr: addr, stream: "IDEMDLQ_" + id, subject: "idemdlq." + id + ".orders", dlqSubject: "idemdlq." + id + ".dlq", js: js}
	ctx := context.Background()
	for name, subj := range map[string]string{b.stream: b.subject, b.stream + "_DLQ": b.dlqSubject} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj}, Storage: jetstream.MemoryStorage,
			MaxAge: time.Hour, Duplicates: 2 * time.Minute}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	}
	return b
}

func (b *natsDLQ) url() string         { return b.addr + "?dlq=" + b.stream + "_DLQ" }
func (b *natsDLQ) keepsReplayed() bool { return false }

// publish sends with natsidem.Publish: Nats-Msg-Id is the key's
// idem.DedupID, which the stream remembers for two minutes.
func (b *natsDLQ) publish(t *testing.T, key, body string) {
	if _, err := natsidem.Publish(context.Background(), b.js, b.subject, key, []byte(body)); err != nil {
		t.Fatal(err)
	}
}

func (b *natsDLQ) consume(ctx context.Context, t *testing.T, store idem.Store, h func(key, body string) error, ev *dlqEvents) error {
	cons, err := b.js.CreateOrUpdateConsumer(ctx, b.stream, jetstream.ConsumerConfig{Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 5 * time.Second, MaxDeliver: 5})
	if err != nil {
		return err
	}
	g, err := natsidem.NewGuard(store, cons, idem.Options{KeepPayload: 1024})
	if err != nil {
		return err
	}
	return natsidem.Consume(ctx, cons, g, natsidem.Handle(func(_ context.Context, msg jetstream.Msg) ([]byte, error) {
		return nil, h(natsidem.MessageOf(msg).ID, string(msg.Data()))
	}), natsidem.Options{JetStream: b.js, DeadLetterSubject: b.dlqSubject, Backoff: fast, Hooks: dlqHooks[jetstream.Msg](ev)})
}

// amqpDLQ: a queue and its dead-letter queue, fed through the default
// exchange, on the shared RabbitMQ.
type amqpDLQ struct {
	addr, queue string
	conn        *amqp.Connection
	ch          *amqp.Channel
}

func newAMQPDLQ(t *testing.T) *amqpDLQ {
	addr := testenv.RabbitMQ.Need(t)
	conn, err := amqp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	b := &amqpDLQ{addr: addr, queue: "idemdlq." + tag(), conn: conn, ch: ch}
	for _, q := range []string{b.queue, b.queue + ".dlq"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if c, err := conn.Channel(); err == nil {
				_, _ = c.QueueDelete(q, false, false, false)
			}
		})
	}
	return b
}

func (b *amqpDLQ) url() string {
	u, _ := url.Parse(b.addr)
	u.RawQuery = url.Values{"dlq": {b.queue + ".dlq"}}.Encode()
	return u.String()
}
func (b *amqpDLQ) keepsReplayed() bool { return false }

func (b *amqpDLQ) publish(t *testing.T, key, body string) {
	if err := b.ch.PublishWithContext(context.Background(), "", b.queue, false, false,
		amqp.Publishing{MessageId: key, Body: []byte(body), DeliveryMode: amqp.Persistent}); err != nil {
		t.Fatal(err)
	}
}

func (b *amqpDLQ) consume(ctx context.Context, t *testing.T, store idem.Store, h func(key, body string) error, ev *dlqEvents) error {
	ch, err := b.conn.Channel()
	if err != nil {
		return err
	}
	g, err := amqpidem.NewGuard(store, b.queue, idem.Options{KeepPayload: 1024})
	if err != nil {
		return err
	}
	return amqpidem.Consume(ctx, ch, g, amqpidem.Handle(func(_ context.Context, d amqp.Delivery) ([]byte, error) {
		return nil, h(d.MessageId, string(d.Body))
	}), amqpidem.Options{Queue: b.queue, DeadLetterRoutingKey: b.queue + ".dlq", Backoff: fast, Hooks: dlqHooks[amqp.Delivery](ev)})
}

// kafkaDLQ: kfake in-process, a topic and its dead-letter topic.
type kafkaDLQ struct {
	addr, topic string
	cl          *kgo.Client
}

func newKafkaDLQ(t *testing.T) *kafkaDLQ {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders", "orders.dlq"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &kafkaDLQ{addr: addr, topic: "orders", cl: cl}
}

func (b *kafkaDLQ) url() string         { return "kafka://" + b.addr + "?dlq=orders.dlq" }
func (b *kafkaDLQ) keepsReplayed() bool { return true }

func (b *kafkaDLQ) publish(t *testing.T, key, body string) {
	rec := &kgo.Record{Topic: b.topic, Value: []byte(body), Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte(key)}}}
	if err := b.cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func (b *kafkaDLQ) consume(ctx context.Context, t *testing.T, store idem.Store, h func(key, body string) error, ev *dlqEvents) error {
	cl, err := kgo.NewClient(kafka.ClientOptions(kgo.SeedBrokers(b.addr), kgo.ConsumerGroup("billing"), kgo.ConsumeTopics(b.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	g, err := kafka.NewGuard(store, cl, idem.Options{KeepPayload: 1024})
	if err != nil {
		return err
	}
	return kafka.Consume(ctx, cl, g, kafka.Handle(func(_ context.Context, rec *kgo.Record) ([]byte, error) {
		return nil, h(kafka.MessageOf(rec).ID, string(rec.Value))
	}), kafka.Options{DeadLetterTopic: "orders.dlq", Backoff: fast, Hooks: dlqHooks[*kgo.Record](ev)})
}

// sbDLQ: servicebustest in-process, one queue.
type sbDLQ struct {
	srv    *servicebustest.Server
	client *azservicebus.Client
	sender *azservicebus.Sender
}

func newServiceBusDLQ(t *testing.T) *sbDLQ {
	srv, err := servicebustest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := srv.CreateQueue("orders", servicebustest.QueueOptions{LockDuration: 5 * time.Second, RequiresDuplicateDetection: true}); err != nil {
		t.Fatal(err)
	}
	client, err := azservicebus.NewClientFromConnectionString(srv.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(context.Background()) })
	s, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	return &sbDLQ{srv: srv, client: client, sender: s}
}

func (b *sbDLQ) url() string         { return b.srv.ConnectionString() + ";EntityPath=orders" }
func (b *sbDLQ) keepsReplayed() bool { return false }

// publish sends with servicebus.Send: MessageID is the key's
// idem.DedupID, which the queue's duplicate detection remembers for ten
// minutes.
func (b *sbDLQ) publish(t *testing.T, key, body string) {
	if err := servicebus.Send(context.Background(), b.sender, key, &azservicebus.Message{Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
}

func (b *sbDLQ) consume(ctx context.Context, t *testing.T, store idem.Store, h func(key, body string) error, ev *dlqEvents) error {
	r, err := b.client.NewReceiverForQueue("orders", nil)
	if err != nil {
		return err
	}
	g, err := servicebus.NewGuard(store, "orders", idem.Options{KeepPayload: 1024})
	if err != nil {
		return err
	}
	return servicebus.Consume(ctx, r, g, servicebus.Handle(func(_ context.Context, m *azservicebus.ReceivedMessage) ([]byte, error) {
		return nil, h(servicebus.MessageOf(m).ID, string(m.Body))
	}), servicebus.Options{EntityPath: "orders", Backoff: fast, Hooks: dlqHooks[*azservicebus.ReceivedMessage](ev)})
}

// ehDLQ: eventhubstest in-process, a hub "orders" of one partition and a
// dead-letter hub "orders-dlq" of two; the consumer is a Processor on the
// in-memory eventhubstest.CheckpointStore.
type ehDLQ struct {
	srv      *eventhubstest.Server
	producer *azeventhubs.ProducerClient
}

func newEventHubsDLQ(t *testing.T) *ehDLQ {
	srv, err := eventhubstest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	for hub, n := range map[string]int{"orders": 1, "orders-dlq": 2} {
		if err := srv.CreateHub(hub, eventhubstest.HubOptions{Partitions: n}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := azeventhubs.NewProducerClientFromConnectionString(srv.ConnectionString(), "orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return &ehDLQ{srv: srv, producer: p}
}

func (b *ehDLQ) url() string {
	return "eventhubs:" + b.srv.ConnectionString() + ";EntityPath=orders-dlq"
}
func (b *ehDLQ) keepsReplayed() bool { return true }

// publish sends with eventhubs.Send: the key is the MessageID, copied
// into Idem-Id.
func (b *ehDLQ) publish(t *testing.T, key, body string) {
	if err := eventhubs.Send(context.Background(), b.producer, nil, &azeventhubs.EventData{MessageID: &key, Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
}

func (b *ehDLQ) consume(ctx context.Context, t *testing.T, store idem.Store, h func(key, body string) error, ev *dlqEvents) error {
	cs := b.srv.ConnectionString()
	cc, err := azeventhubs.NewConsumerClientFromConnectionString(cs, "orders", azeventhubs.DefaultConsumerGroup, nil)
	if err != nil {
		return err
	}
	defer cc.Close(context.Background())
	dlq, err := azeventhubs.NewProducerClientFromConnectionString(cs, "orders-dlq", nil)
	if err != nil {
		return err
	}
	defer dlq.Close(context.Background())
	yes := true
	p, err := azeventhubs.NewProcessor(cc, eventhubstest.NewCheckpointStore(), &azeventhubs.ProcessorOptions{
		StartPositions: azeventhubs.StartPositions{Default: azeventhubs.StartPosition{Earliest: &yes}}, UpdateInterval: 200 * time.Millisecond})
	if err != nil {
		return err
	}
	g, err := eventhubs.NewGuard(store, "orders", azeventhubs.DefaultConsumerGroup, idem.Options{KeepPayload: 1024})
	if err != nil {
		return err
	}
	return eventhubs.Consume(ctx, p, g, eventhubs.Handle(func(_ context.Context, e *azeventhubs.ReceivedEventData) ([]byte, error) {
		return nil, h(eventhubs.MessageOf(e).ID, string(e.Body))
	}), eventhubs.Options{EventHub: "orders", DeadLetter: dlq, Backoff: fast, ReceiveWait: 100 * time.Millisecond,
		Hooks: dlqHooks[*azeventhubs.ReceivedEventData](ev)})
}
