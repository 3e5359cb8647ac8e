package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/idemgo/idem"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/store/memory"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// fakeMsg is a jetstream.Msg with headers and data only.
type fakeMsg struct {
	jetstream.Msg
	h    nats.Header
	data []byte
}

func (m fakeMsg) Headers() nats.Header { return m.h }
func (m fakeMsg) Data() []byte         { return m.data }

func TestMessageOfKeys(t *testing.T) {
	g := func(key idem.KeyFunc) *idem.Guard {
		g, err := idem.New(memory.New(), idem.Options{Scope: "S/c", Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	tests := []struct {
		name    string
		key     idem.KeyFunc
		msg     fakeMsg
		want    string
		wantErr error
	}{
		{"Nats-Msg-Id by default", nil,
			fakeMsg{h: nats.Header{"Nats-Msg-Id": {"order-1"}, "X-Other": {"a", "b"}}}, "order-1", nil},
		{"no Nats-Msg-Id", nil, fakeMsg{h: nats.Header{"X-Other": {"a"}}}, "", idem.ErrNoKey},
		{"no headers at all", nil, fakeMsg{data: []byte("x")}, "", idem.ErrNoKey},
		{"CloudEvents binary, any case", idem.CloudEventsKey,
			fakeMsg{h: nats.Header{"Ce-Id": {"e1"}, "Ce-Source": {"/orders"}, "Ce-Specversion": {"1.0"}}}, "/orders|e1", nil},
		{"CloudEvents binary lowercase", idem.CloudEventsKey,
			fakeMsg{h: nats.Header{"ce-id": {"e2"}, "ce-source": {"/orders"}}}, "/orders|e2", nil},
		{"CloudEvents structured", idem.CloudEventsKey,
			fakeMsg{h: nats.Header{"content-type": {"application/cloudevents+json"}},
				data: []byte(`{"specversion":"1.0","id":"e3","source":"/s","type":"t"}`)}, "/s|e3", nil},
		{"CloudEvents structured without source", idem.CloudEventsKey,
			fakeMsg{h: nats.Header{"Content-Type": {"application/cloudevents+json"}},
				data: []byte(`{"specversion":"1.0","id":"e3"}`)}, "", idem.ErrInvalidKey},
		{"a replay's Nats-Msg-Id reads as the original's", nil,
			fakeMsg{h: nats.Header{"Nats-Msg-Id": {"order-1~replay-0123456789abcdef"}}}, "order-1", nil},
		{"a replay of a Publish'd message, keyed by Nats-Msg-Id", idem.HeaderKey(jetstream.MsgIDHeader),
			fakeMsg{h: nats.Header{"Nats-Msg-Id": {"order-1~0123456789abcdef~replay-fedcba9876543210"}, natsidem.HeaderID: {"order-1"}}}, "order-1", nil},
		{"a mark without its nonce is part of the id", nil,
			fakeMsg{h: nats.Header{"Nats-Msg-Id": {"order-1~replay-later"}}}, "order-1~replay-later", nil},
		{"user header key", idem.HeaderKey("Idempotency-Key"),
			fakeMsg{h: nats.Header{"Idempotency-Key": {"k-9"}}}, "k-9", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := g(tt.key).Key(natsidem.MessageOf(tt.msg))
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && k.ID != tt.want) {
				t.Fatalf("key = %q, %v; want %q, %v", k.ID, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestMessageOfFields(t *testing.T) {
	m := natsidem.MessageOf(fakeMsg{
		h:    nats.Header{"Nats-Msg-Id": {"id-1"}, "content-type": {"application/json"}, "Multi": {"first", "second"}},
		data: []byte(`{"a":1}`),
	})
	if m.ID != "id-1" || m.ContentType != "application/json" || m.Headers["Multi"] != "first" || string(m.Payload) != `{"a":1}` {
		t.Fatalf("MessageOf = %+v", m)
	}
}

func TestNewConsumerValidation(t *testing.T) {
	g, err := idem.New(memory.New(), idem.Options{Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	h := natsidem.Handle(func(context.Context, jetstream.Msg) ([]byte, error) { return nil, nil })
	var js jetstream.JetStream = struct{ jetstream.JetStream }{}
	var cons jetstream.Consumer = struct{ jetstream.Consumer }{}
	ok := natsidem.Options{JetStream: js, DeadLetterSubject: "dlq"}
	tests := []struct {
		name string
		cons jetstream.Consumer
		g    *idem.Guard
		h    natsidem.Handler
		opts natsidem.Options
	}{
		{"nil consumer", nil, g, h, ok},
		{"nil guard", cons, nil, h, ok},
		{"nil handler", cons, g, natsidem.Handle(nil), ok},
		{"nil tx handler", cons, g, natsidem.HandleTx[*sql.Tx](nil), ok},
		{"no JetStream", cons, g, h, natsidem.Options{DeadLetterSubject: "dlq"}},
		{"no dead-letter subject", cons, g, h, natsidem.Options{JetStream: js}},
		{"negative concurrency", cons, g, h, natsidem.Options{Concurrency: -1, JetStream: js, DeadLetterSubject: "dlq"}},
		{"wildcard dead-letter subject", cons, g, h, natsidem.Options{JetStream: js, DeadLetterSubject: "dlq.>"}},
		{"dead letters into the consumer's own filter", filtered("orders.>"), g, h, natsidem.Options{JetStream: js, DeadLetterSubject: "orders.dlq"}},
		{"dead letters into one of its filters", filtered("a.b", "orders.*.dlq"), g, h, natsidem.Options{JetStream: js, DeadLetterSubject: "orders.x.dlq"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := natsidem.NewConsumer(tt.cons, tt.g, tt.h, tt.opts); !errors.Is(err, idem.ErrInvalidOptions) {
				t.Fatalf("err = %v, want ErrInvalidOptions", err)
			}
		})
	}
}

// filtered is a consumer filtering its stream by subjects.
func filtered(subjects ...string) jetstream.Consumer {
	return infoConsumer{info: &jetstream.ConsumerInfo{Stream: "S", Name: "c",
		Config: jetstream.ConsumerConfig{FilterSubjects: subjects}}}
}

// TestDeadLetterSubjectOutsideFilter: a dead-letter subject the consumer's
// filters do not match is accepted.
func TestDeadLetterSubjectOutsideFilter(t *testing.T) {
	g, err := idem.New(memory.New(), idem.Options{Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	h := natsidem.Handle(func(context.Context, jetstream.Msg) ([]byte, error) { return nil, nil })
	var js jetstream.JetStream = struct{ jetstream.JetStream }{}
	for _, dlq := range []string{"orders", "orders.x.y.dlq", "dlq.orders.x"} {
		if _, err := natsidem.NewConsumer(filtered("orders.*.dlq.>", "orders.*"), g, h, natsidem.Options{JetStream: js, DeadLetterSubject: dlq}); err != nil {
			t.Errorf("dead letters to %s: %v", dlq, err)
		}
	}
}

// TestNewGuardScope: the scope is the consumer's identity unless set; a
// consumer without cached info cannot name it.
func TestNewGuardScope(t *testing.T) {
	g, err := natsidem.NewGuard(memory.New(), filtered(), idem.Options{})
	if err != nil || g.Options().Scope != "S/c" {
		t.Fatalf("scope %v, %v; want S/c", g, err)
	}
	g, err = natsidem.NewGuard(memory.New(), filtered(), idem.Options{Scope: "billing"})
	if err != nil || g.Options().Scope != "billing" {
		t.Fatalf("set scope: %v, %v; want it kept", g, err)
	}
	var bare jetstream.Consumer = infoConsumer{}
	if _, err := natsidem.NewGuard(memory.New(), bare, idem.Options{}); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Fatalf("no cached info: %v, want ErrInvalidOptions", err)
	}
}

func TestPublishNeedsID(t *testing.T) {
	if _, err := natsidem.Publish(context.Background(), nil, "s", " ", nil); !errors.Is(err, idem.ErrNoKey) {
		t.Fatalf("err = %v, want ErrNoKey", err)
	}
}

func TestHandleTxNeedsTxStore(t *testing.T) {
	g, err := idem.New(memory.New(), idem.Options{Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	var js jetstream.JetStream = struct{ jetstream.JetStream }{}
	var cons jetstream.Consumer = struct{ jetstream.Consumer }{}
	h := natsidem.HandleTx(func(context.Context, *sql.Tx, jetstream.Msg) ([]byte, error) { return nil, nil })
	_, err = natsidem.NewConsumer(cons, g, h, natsidem.Options{JetStream: js, DeadLetterSubject: "dlq"})
	if !errors.Is(err, idem.ErrNoTx) || !errors.Is(err, idem.ErrInvalidOptions) {
		t.Fatalf("err = %v, want ErrNoTx and ErrInvalidOptions", err)
	}
}

// TestMessageOfPublished: a message sent by Publish carries its plain id in
// Idem-Id and idem.DedupID in Nats-Msg-Id; the guard's view has the plain
// id as ID and under Nats-Msg-Id, so keys read either way are the
// producer's id. A Nats-Msg-Id that is not the dedup id of Idem-Id is left
// as it is.
func TestMessageOfPublished(t *testing.T) {
	dedup := idem.DedupID("order-1", "fp")
	m := natsidem.MessageOf(fakeMsg{h: nats.Header{"Nats-Msg-Id": {dedup}, natsidem.HeaderID: {"order-1"}}})
	if m.ID != "order-1" || m.Headers["Nats-Msg-Id"] != "order-1" {
		t.Fatalf("MessageOf = %+v, want the plain id as ID and under Nats-Msg-Id", m)
	}
	m = natsidem.MessageOf(fakeMsg{h: nats.Header{"Nats-Msg-Id": {"other~0123456789abcdef"}, natsidem.HeaderID: {"order-1"}}})
	if m.ID != "order-1" || m.Headers["Nats-Msg-Id"] != "other~0123456789abcdef" {
		t.Fatalf("MessageOf = %+v, want a foreign Nats-Msg-Id kept", m)
	}
}
