package watermillidem_test

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"regexp"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	watermillidem "github.com/idemgo/idem/broker/watermill"
	"github.com/idemgo/idem/store/memory"
)

// recorder is a message.Publisher that keeps what it is given.
type recorder struct {
	topics []string
	msgs   []*message.Message
}

func (r *recorder) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		r.topics = append(r.topics, topic)
		r.msgs = append(r.msgs, m)
	}
	return nil
}

func (r *recorder) Close() error { return nil }

func TestNewGuardScope(t *testing.T) {
	tests := []struct {
		name, handler, scope, want string
		wantErr                    error
	}{
		{"the handler's name", "billing", "", "billing", nil},
		{"a set scope kept", "billing", "mine", "mine", nil},
		{"no handler name", "", "", "", idem.ErrInvalidOptions},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := watermillidem.NewGuard(memory.New(), tt.handler, idem.Options{Scope: tt.scope})
			if !errors.Is(err, tt.wantErr) || (err == nil && g.Options().Scope != tt.want) {
				t.Fatalf("NewGuard = %v, %v; want scope %q, %v", g, err, tt.want, tt.wantErr)
			}
		})
	}
}

// TestHandleTx: HandleTx is HandlerTx: a nil function, and a store without
// transactions of its type, are refused.
func TestHandleTx(t *testing.T) {
	mw := newMiddleware(t, &recorder{}, broker.Hooks[*message.Message]{})
	if _, err := watermillidem.HandleTx[*sql.Tx](mw, nil); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Fatalf("HandleTx(nil): %v, want ErrInvalidOptions", err)
	}
	_, err := watermillidem.HandleTx(mw, func(context.Context, *sql.Tx, *message.Message) ([]*message.Message, error) { return nil, nil })
	if !errors.Is(err, idem.ErrNoTx) {
		t.Fatalf("HandleTx on the memory store: %v, want ErrNoTx", err)
	}
	if watermillidem.Handle(mw, func(*message.Message) ([]*message.Message, error) { return nil, nil }) == nil {
		t.Fatal("Handle returned no handler")
	}
}

// deadLetter is a dead letter as a Middleware writes it (DeadLetter, in a
// router handler of topic "orders" named "billing").
func deadLetter(uuid string, meta map[string]string) *message.Message {
	dl := message.NewMessage(uuid, []byte(`{"n":1}`))
	maps.Copy(dl.Metadata, meta)
	maps.Copy(dl.Metadata, map[string]string{
		idem.HeaderReason: "conflict", idem.HeaderError: "conflict", idem.HeaderDeadLetterKey: "billing/x",
		watermillidem.HeaderTopic: "orders", watermillidem.TopicPoisoned: "orders",
		watermillidem.HeaderHandler: "billing", watermillidem.HandlerPoisoned: "billing",
		watermillidem.SubscriberPoison: "sub", watermillidem.ReasonPoisoned: "conflict: conflict",
	})
	return dl
}

func TestDeadLetterOf(t *testing.T) {
	tests := []struct {
		name               string
		msg                *message.Message
		wantID, wantReason string
		wantErr            error
	}{
		{"keyed by its UUID", deadLetter("uuid-1", nil), "uuid-1", "conflict", nil},
		{"keyed by its Idem-Id", deadLetter("uuid-2", map[string]string{watermillidem.HeaderID: "order-2"}), "order-2", "conflict", nil},
		{"a message of the work topic", message.NewMessage("uuid-3", []byte(`{"n":1}`)), "uuid-3", "", watermillidem.ErrNotDeadLetter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := watermillidem.DeadLetterOf(tt.msg)
			if !errors.Is(err, tt.wantErr) || m.ID != tt.wantID || m.Header(idem.HeaderReason) != tt.wantReason || string(m.Payload) != `{"n":1}` {
				t.Fatalf("DeadLetterOf = %+v, %v; want ID %q, reason %q, %v", m, err, tt.wantID, tt.wantReason, tt.wantErr)
			}
		})
	}
}

// TestReplay: a replay goes to the handler's topic with a UUID of its own
// (a Pub/Sub that deduplicates by UUID would drop the original's) and the
// original's key in Idem-Id, without idem's dead-letter metadata; the
// guard sees it as it saw the original.
func TestReplay(t *testing.T) {
	tests := []struct {
		name string
		orig *message.Message
	}{
		{"keyed by its UUID", message.NewMessage("uuid-1", []byte(`{"n":1}`))},
		{"keyed by its Idem-Id", message.NewMessage("uuid-2", []byte(`{"n":1}`))},
	}
	tests[0].orig.Metadata["tenant"] = "t1"
	tests[1].orig.Metadata[watermillidem.HeaderID] = "order-2"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pub := &recorder{}
			dl := deadLetter(tt.orig.UUID, tt.orig.Metadata)
			for range 2 {
				if err := watermillidem.Replay(context.Background(), pub, dl); err != nil {
					t.Fatal(err)
				}
			}
			if len(pub.msgs) != 2 || pub.topics[0] != "orders" {
				t.Fatalf("published %d to %v, want 2 to orders", len(pub.msgs), pub.topics)
			}
			want := watermillidem.MessageOf(tt.orig)
			for _, r := range pub.msgs {
				if r.UUID == tt.orig.UUID || r.UUID == "" {
					t.Fatalf("replay's UUID %q, want one of its own", r.UUID)
				}
				got := watermillidem.MessageOf(r)
				if got.ID != want.ID || string(got.Payload) != string(want.Payload) {
					t.Fatalf("the guard sees the replay as %+v, the original as %+v", got, want)
				}
				for k, v := range r.Metadata {
					if k != watermillidem.HeaderID && tt.orig.Metadata[k] != v {
						t.Errorf("replay carries %s=%q, not the original's", k, v)
					}
				}
				for k, v := range tt.orig.Metadata {
					if r.Metadata[k] != v {
						t.Errorf("replay lacks the original's %s=%q", k, v)
					}
				}
			}
			if pub.msgs[0].UUID == pub.msgs[1].UUID {
				t.Fatal("two replays share a UUID")
			}
		})
	}
	if err := watermillidem.Replay(context.Background(), &recorder{}, message.NewMessage("u", nil)); !errors.Is(err, watermillidem.ErrNotDeadLetter) {
		t.Fatalf("Replay of a message of the work topic: %v, want ErrNotDeadLetter", err)
	}
}

type callerKey struct{}

var uuidForm = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestPublish: the id travels in Idem-Id; the UUID is a version-8 UUID of
// the id and the content: the same for a retry of the same content,
// another for an id reused with other content (so no Pub/Sub that
// deduplicates by UUID swallows a conflict) and for another id.
func TestPublish(t *testing.T) {
	ctx := context.WithValue(context.Background(), callerKey{}, "caller")
	pub := &recorder{}
	msg := func(payload string) *message.Message {
		m := message.NewMessage("ignored", []byte(payload))
		m.Metadata["tenant"] = "t1"
		return m
	}
	sends := []struct{ id, payload string }{{"order-1", "a"}, {"order-1", "a"}, {"order-1", "b"}, {"order-2", "a"}}
	for _, s := range sends {
		m := msg(s.payload)
		if err := watermillidem.Publish(ctx, pub, "orders", s.id, m); err != nil {
			t.Fatal(err)
		}
		if m.UUID != "ignored" || m.Metadata[watermillidem.HeaderID] != "" {
			t.Fatalf("Publish changed the caller's message: %v %v", m.UUID, m.Metadata)
		}
	}
	for i, m := range pub.msgs {
		if !uuidForm.MatchString(m.UUID) || pub.topics[i] != "orders" || m.Context() != ctx {
			t.Fatalf("message %d: UUID %q to %s, want a version-8 UUID to orders, with the caller's context", i, m.UUID, pub.topics[i])
		}
		if got := watermillidem.MessageOf(m); got.ID != sends[i].id || got.Header("tenant") != "t1" || string(got.Payload) != sends[i].payload {
			t.Fatalf("message %d read as %+v", i, got)
		}
	}
	u := func(i int) string { return pub.msgs[i].UUID }
	if u(0) != u(1) || u(0) == u(2) || u(0) == u(3) || u(2) == u(3) {
		t.Fatalf("UUIDs %q %q %q %q: want a retry's equal, a reuse's and another id's apart", u(0), u(1), u(2), u(3))
	}

	byTenant := func(m idem.Message) (string, error) { return m.Header("tenant"), nil }
	a, b := &recorder{}, &recorder{}
	if err := watermillidem.Publish(ctx, a, "orders", "order-1", msg("a"), watermillidem.WithFingerprint(byTenant)); err != nil {
		t.Fatal(err)
	}
	if err := watermillidem.Publish(ctx, b, "orders", "order-1", msg("b"), watermillidem.WithFingerprint(byTenant)); err != nil {
		t.Fatal(err)
	}
	if a.msgs[0].UUID != b.msgs[0].UUID {
		t.Fatal("WithFingerprint: the same fingerprint gave two UUIDs")
	}
	failing := func(idem.Message) (string, error) { return "", errors.New("no") }
	if err := watermillidem.Publish(ctx, &recorder{}, "orders", "order-1", msg("a"), watermillidem.WithFingerprint(failing)); err == nil {
		t.Fatal("a failing fingerprint published")
	}
	if err := watermillidem.Publish(ctx, &recorder{}, "orders", "", msg("a")); !errors.Is(err, idem.ErrNoKey) {
		t.Fatalf("no id: %v, want ErrNoKey", err)
	}
}
