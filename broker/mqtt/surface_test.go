package mqttidem_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/idemgo/idem"
	mqttidem "github.com/idemgo/idem/broker/mqtt"
	"github.com/idemgo/idem/store/memory"
)

// TestNewGuardScope: the scope is the consumer's identity, the one that
// gets its own copy of each message: a shared subscription, or the
// session of an unshared one.
func TestNewGuardScope(t *testing.T) {
	tests := []struct {
		name            string
		topic, clientID string
		scope, want     string
		wantErr         error
	}{
		{"a shared subscription", "$share/ingest/sensors/+/readings", "ingest-1", "", "$share/ingest/sensors/+/readings", nil},
		{"an unshared subscription: the session", "sensors/+/readings", "ingest-1", "", "ingest-1", nil},
		{"a set scope kept", "sensors/+/readings", "ingest-1", "mine", "mine", nil},
		{"an unshared subscription without a client id", "sensors/+/readings", "", "", "", idem.ErrInvalidOptions},
		{"no topic", "", "ingest-1", "", "", idem.ErrInvalidOptions},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := mqttidem.NewGuard(memory.New(), tt.topic, tt.clientID, idem.Options{Scope: tt.scope})
			if !errors.Is(err, tt.wantErr) || (err == nil && g.Options().Scope != tt.want) {
				t.Fatalf("NewGuard = %v, %v; want scope %q, %v", g, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestDeadLetterOf(t *testing.T) {
	props := func(kv ...string) *paho.PublishProperties {
		p := &paho.PublishProperties{}
		for i := 0; i < len(kv); i += 2 {
			p.User.Add(kv[i], kv[i+1])
		}
		return p
	}
	tests := []struct {
		name               string
		p                  *paho.Publish
		wantID, wantReason string
		wantErr            error
	}{
		{"a consumer's dead letter", &paho.Publish{Topic: "dlq/sensors", Payload: []byte("b"), Properties: props(
			mqttidem.PropertyID, "r-1", mqttidem.PropertyTopic, "sensors/1/readings", idem.HeaderReason, "conflict")}, "r-1", "conflict", nil},
		{"a message of the work topic", &paho.Publish{Topic: "sensors/1/readings", Payload: []byte("b"), Properties: props(mqttidem.PropertyID, "r-2")},
			"r-2", "", mqttidem.ErrNotDeadLetter},
		{"a message without properties", &paho.Publish{Topic: "sensors/1/readings", Payload: []byte("b")}, "", "", mqttidem.ErrNotDeadLetter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := mqttidem.DeadLetterOf(tt.p)
			if !errors.Is(err, tt.wantErr) || m.ID != tt.wantID || m.Header(idem.HeaderReason) != tt.wantReason || string(m.Payload) != "b" {
				t.Fatalf("DeadLetterOf = %+v, %v; want ID %q, reason %q, %v", m, err, tt.wantID, tt.wantReason, tt.wantErr)
			}
		})
	}
	if err := mqttidem.Replay(context.Background(), nil, tests[1].p); !errors.Is(err, mqttidem.ErrNotDeadLetter) {
		t.Fatalf("Replay of a message of the work topic: %v, want ErrNotDeadLetter", err)
	}
}

func TestPublishNeedsID(t *testing.T) {
	if _, err := mqttidem.Publish(context.Background(), nil, " ", &paho.Publish{Topic: "sensors/1/readings"}); !errors.Is(err, idem.ErrNoKey) {
		t.Fatalf("err = %v, want ErrNoKey", err)
	}
}

// TestHandlers: Handle(nil), HandleTx(nil) and a HandleTx whose store has
// no transactions are refused by NewConsumer and Consume, before any
// connection.
func TestHandlers(t *testing.T) {
	opts := mqttidem.Options{Server: "mqtt://127.0.0.1:1", ClientID: "ingest-1", Topic: "sensors/+/readings", DeadLetterTopic: "dlq/sensors"}
	g, err := mqttidem.NewGuard(memory.New(), opts.Topic, opts.ClientID, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		h    mqttidem.Handler
		want error
	}{
		{"Handle(nil)", mqttidem.Handle(nil), idem.ErrInvalidOptions},
		{"HandleTx(nil)", mqttidem.HandleTx[*sql.Tx](nil), idem.ErrInvalidOptions},
		{"HandleTx on a store without transactions", mqttidem.HandleTx(func(context.Context, *sql.Tx, *mqttidem.Message) ([]byte, error) { return nil, nil }), idem.ErrNoTx},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := mqttidem.NewConsumer(g, tt.h, opts); !errors.Is(err, tt.want) {
				t.Fatalf("NewConsumer: %v, want %v", err, tt.want)
			}
			if err := mqttidem.Consume(context.Background(), g, tt.h, opts); !errors.Is(err, tt.want) {
				t.Fatalf("Consume: %v, want %v", err, tt.want)
			}
		})
	}
	ok := mqttidem.Handle(func(context.Context, *mqttidem.Message) ([]byte, error) { return nil, nil })
	if _, err := mqttidem.NewConsumer(g, ok, opts); err != nil {
		t.Fatalf("NewConsumer(Handle(fn)): %v", err)
	}
}
