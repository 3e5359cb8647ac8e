package outboxenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/outbox"
	outboxnats "github.com/idemgo/idem/outbox/nats"
	"github.com/idemgo/idem/outbox/outboxtest"
)

// JetStream is one test's stream on the NATS server testenv names.
type JetStream struct {
	Conn    *nats.Conn
	JS      jetstream.JetStream
	Stream  string
	Subject string // the stream's subject
}

// MaxMsgSize is the largest message the test streams take: a bigger one is
// refused by the stream.
const MaxMsgSize = 4096

// NewJetStream creates a stream of its own (memory storage, a duplicate
// window of dupWindow, messages up to MaxMsgSize), deleted at the end.
func NewJetStream(t testing.TB, dupWindow time.Duration) *JetStream {
	t.Helper()
	nc, err := nats.Connect(testenv.NATS.Need(t), nats.Name(t.Name()))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("%d_%d", time.Now().UnixNano(), rand.Uint32())
	j := &JetStream{Conn: nc, JS: js, Stream: "OUTBOX_" + tag, Subject: "outbox." + tag}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: j.Stream, Subjects: []string{j.Subject}, Storage: jetstream.MemoryStorage,
		Duplicates: dupWindow, MaxMsgSize: MaxMsgSize,
	}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, j.Stream)
	})
	return j
}

// Receive returns a function reading the stream from its start, in order,
// each message as natsidem.MessageOf builds it.
func (j *JetStream) Receive(t testing.TB) func(ctx context.Context) (idem.Message, error) {
	t.Helper()
	ctx := context.Background()
	cons, err := j.JS.OrderedConsumer(ctx, j.Stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(it.Stop)
	msgs := make(chan jetstream.Msg, 1024)
	go func() {
		defer close(msgs)
		for {
			m, err := it.Next()
			if err != nil {
				return
			}
			msgs <- m
		}
	}()
	return func(ctx context.Context) (idem.Message, error) {
		select {
		case m, ok := <-msgs:
			if !ok {
				return idem.Message{}, fmt.Errorf("the stream's consumer stopped")
			}
			return natsidem.MessageOf(m), nil
		case <-ctx.Done():
			return idem.Message{}, ctx.Err()
		}
	}
}

// NATS is outboxtest's broker on JetStream. The duplicate window is the
// shortest the server takes, so the relay's repeats land after it, as a
// repeat after minutes would, and reach the consumer.
func NATS(t *testing.T) outboxtest.Broker {
	j := NewJetStream(t, 100*time.Millisecond)
	pub, err := outboxnats.New(j.JS, outboxnats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return outboxtest.Broker{
		Publisher:   pub,
		Destination: j.Subject,
		Receive:     j.Receive(t),
		Dedups:      true,
		Rejected:    &outbox.Message{ID: "too-large", Destination: j.Subject, Payload: []byte(strings.Repeat("x", 2*MaxMsgSize))},
	}
}
