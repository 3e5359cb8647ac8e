package natsidem_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// dupWindow is the input stream's duplicate window.
const dupWindow = 100 * time.Millisecond

// env is one test's isolated JetStream world: a stream for the input
// subjects and a stream capturing the dead-letter subject, both deleted at
// the end.
type env struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  string
	subject string // input subjects are subject + ".<anything>"
	dlq     string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	url := testenv.NATS.Need(t)
	nc, err := nats.Connect(url, nats.Name(t.Name()))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("%d_%d", time.Now().UnixNano(), rand.Uint32())
	e := &env{
		nc: nc, js: js,
		stream:  "IDEMT_" + tag,
		subject: "idemt." + tag + ".in",
		dlq:     "idemt." + tag + ".dlq",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     e.stream,
		Subjects: []string{e.subject + ".>"},
		Storage:  jetstream.MemoryStorage,
		// The shortest duplicate window the server accepts: the test's
		// producer retries land after it, as retries after minutes do in
		// production, so the broker stores and delivers them and only the
		// consumer-side guard can drop them.
		Duplicates: dupWindow,
	}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     e.stream + "_DLQ",
		Subjects: []string{e.dlq},
		Storage:  jetstream.MemoryStorage,
	}); err != nil {
		t.Fatalf("create dead-letter stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, e.stream)
		_ = js.DeleteStream(ctx, e.stream+"_DLQ")
	})
	return e
}

func (e *env) consumer(t testing.TB, durable string, ackWait time.Duration) jetstream.Consumer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := e.js.CreateOrUpdateConsumer(ctx, e.stream, jetstream.ConsumerConfig{
		Durable:       durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: 1000,
	})
	if err != nil {
		t.Fatalf("create consumer: %v", err)
	}
	return cons
}

// streamMsgs is the number of messages the input stream holds.
func (e *env) streamMsgs(t testing.TB) uint64 {
	t.Helper()
	s, err := e.js.Stream(context.Background(), e.stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// deadLetters reads every message of the dead-letter stream.
func (e *env) deadLetters(t testing.TB) []*nats.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, e.stream+"_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*nats.Msg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		raw, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get dead letter %d: %v", seq, err)
		}
		out = append(out, &nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data})
	}
	return out
}

// publishAll publishes msgs with async publishing and waits for every ack.
func (e *env) publishAll(t testing.TB, msgs []*nats.Msg) {
	t.Helper()
	for _, m := range msgs {
		if _, err := e.js.PublishMsgAsync(m); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("publishing did not complete")
	}
}

// lossyConsumer wraps a consumer so that the acks of chosen first
// deliveries are lost: Ack reports success but never reaches the server,
// as when a consumer crashes right after its handler, and AckWait expiry
// redelivers the message.
type lossyConsumer struct {
	jetstream.Consumer
	lose func(msg jetstream.Msg) bool
}

func (c lossyConsumer) Messages(opts ...jetstream.PullMessagesOpt) (jetstream.MessagesContext, error) {
	it, err := c.Consumer.Messages(opts...)
	if err != nil {
		return nil, err
	}
	return lossyIter{it, c.lose}, nil
}

type lossyIter struct {
	jetstream.MessagesContext
	lose func(msg jetstream.Msg) bool
}

func (it lossyIter) Next(opts ...jetstream.NextOpt) (jetstream.Msg, error) {
	m, err := it.MessagesContext.Next(opts...)
	if err != nil {
		return nil, err
	}
	return &lossyMsg{Msg: m, lose: it.lose(m)}, nil
}

type lossyMsg struct {
	jetstream.Msg
	lose bool
	mu   sync.Mutex
	lost bool
}

func (m *lossyMsg) Ack() error {
	if m.lose {
		m.mu.Lock()
		m.lost = true
		m.mu.Unlock()
		return nil
	}
	return m.Msg.Ack()
}

func (m *lossyMsg) DoubleAck(ctx context.Context) error {
	if m.lose {
		return m.Ack()
	}
	return m.Msg.DoubleAck(ctx)
}

func (m *lossyMsg) ackLost() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lost
}

func seqOf(t *testing.T, m jetstream.Msg) uint64 {
	md, err := m.Metadata()
	if err != nil {
		t.Errorf("metadata: %v", err)
		return 0
	}
	return md.Sequence.Stream
}

func hdr(m *nats.Msg, k string) string {
	if m.Header == nil {
		return ""
	}
	if v := m.Header.Get(k); v != "" {
		return v
	}
	for hk, v := range m.Header {
		if strings.EqualFold(hk, k) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// loseFirstAck loses the ack of the first delivery of every stream sequence
// equal to rem modulo every.
func loseFirstAck(cons jetstream.Consumer, every, rem uint64) lossyConsumer {
	return lossyConsumer{Consumer: cons, lose: func(m jetstream.Msg) bool {
		md, err := m.Metadata()
		return err == nil && md.NumDelivered == 1 && md.Sequence.Stream%every == rem
	}}
}

// publishWithRetries publishes unique messages to e.subject+suffix, mk
// giving each one's Nats-Msg-Id and data, then, once the stream's duplicate
// window has passed, every fourth one again (a producer retry the server
// cannot drop). It returns how many messages the stream holds.
func (e *env) publishWithRetries(t testing.TB, suffix string, unique int, mk func(i int) (id string, data []byte)) int {
	t.Helper()
	var originals, retries []*nats.Msg
	for i := range unique {
		m := nats.NewMsg(e.subject + suffix)
		id, data := mk(i)
		m.Header.Set(jetstream.MsgIDHeader, id)
		m.Data = data
		originals = append(originals, m)
		if i%4 == 0 {
			retries = append(retries, m)
		}
	}
	e.publishAll(t, originals)
	time.Sleep(3 * dupWindow) // see TestEffectivelyOnce
	e.publishAll(t, retries)
	return int(e.streamMsgs(t))
}
