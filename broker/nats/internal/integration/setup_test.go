package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/internal/testenv"
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
	return newEnvOn(t, nc, func(*jetstream.StreamConfig) {})
}

// newEnvOn makes the env on nc, which it closes at the end; adjust changes
// both streams' configuration before they are created.
func newEnvOn(t testing.TB, nc *nats.Conn, adjust func(*jetstream.StreamConfig), opts ...jetstream.JetStreamOpt) *env {
	t.Helper()
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, opts...)
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
	in := jetstream.StreamConfig{
		Name:     e.stream,
		Subjects: []string{e.subject + ".>"},
		Storage:  jetstream.MemoryStorage,
		// The shortest duplicate window the server accepts: the test's
		// producer retries land after it, as retries after minutes do in
		// production, so the broker stores and delivers them and only the
		// consumer-side guard can drop them.
		Duplicates: dupWindow,
	}
	dlq := jetstream.StreamConfig{
		Name:     e.stream + "_DLQ",
		Subjects: []string{e.dlq},
		Storage:  jetstream.MemoryStorage,
	}
	adjust(&in)
	adjust(&dlq)
	if _, err := js.CreateStream(ctx, in); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	if _, err := js.CreateStream(ctx, dlq); err != nil {
		t.Fatalf("create dead-letter stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, e.stream)
		_ = js.DeleteStream(ctx, e.stream+"_DLQ")
		// The advisory streams its consumers made (natsidem.Options.AdvisoryStream).
		names := js.StreamNames(ctx)
		for name := range names.Name() {
			if strings.HasPrefix(name, natsidem.DefaultAdvisoryStream+"_"+e.stream+"_") {
				_ = js.DeleteStream(ctx, name)
			}
		}
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
