package outboxenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/outbox"
	outboxkafka "github.com/idemgo/idem/outbox/kafka"
	"github.com/idemgo/idem/outbox/outboxtest"
)

// KafkaMaxMessage is message.max.bytes of the test clusters: a bigger
// record is refused by the broker.
const KafkaMaxMessage = 4096

// Kafka is one in-process Kafka cluster (kfake) with a topic of one
// partition, a producing client and a consumer of the topic.
type Kafka struct {
	Cluster  *kfake.Cluster
	Client   *kgo.Client
	Topic    string
	Consumer *kgo.Client
}

// NewKafka starts the cluster, closed at the end.
func NewKafka(t testing.TB) *Kafka {
	t.Helper()
	topic := "outbox-" + strings.ReplaceAll(fmt.Sprint(time.Now().UnixNano()), "-", "")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": fmt.Sprint(KafkaMaxMessage)}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cons.Close)
	return &Kafka{Cluster: c, Client: cl, Topic: topic, Consumer: cons}
}

// Receive returns a function reading the topic in order, each record as
// kafka.MessageOf builds it.
func (k *Kafka) Receive() func(ctx context.Context) (idem.Message, error) {
	var buf []*kgo.Record
	return func(ctx context.Context) (idem.Message, error) {
		for len(buf) == 0 {
			f := k.Consumer.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				return idem.Message{}, err
			}
			if errs := f.Errors(); len(errs) > 0 {
				return idem.Message{}, errs[0].Err
			}
			buf = f.Records()
		}
		r := buf[0]
		buf = buf[1:]
		return kafka.MessageOf(r), nil
	}
}

// KafkaBroker is outboxtest's broker on kfake.
func KafkaBroker(t *testing.T) outboxtest.Broker {
	k := NewKafka(t)
	pub, err := outboxkafka.New(k.Client, outboxkafka.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return outboxtest.Broker{
		Publisher:   pub,
		Destination: k.Topic,
		Receive:     k.Receive(),
		Rejected:    &outbox.Message{ID: "too-large", Destination: k.Topic, Payload: Incompressible(2 * KafkaMaxMessage)},
	}
}

// Incompressible returns n bytes that compression does not shrink (the
// producer compresses batches before the broker measures them).
func Incompressible(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}
