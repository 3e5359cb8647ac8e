package redisstream_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/redisstream"
	"github.com/idemgo/idem/store/memory"
)

// TestNewGuardScope: the scope is the stream and the group unless set;
// with neither there is none to take.
func TestNewGuardScope(t *testing.T) {
	tests := []struct {
		name          string
		stream, group string
		scope         string
		want          string
		wantErr       error
	}{
		{"the group's identity", "orders", "billing", "", "orders/billing", nil},
		{"a set scope kept", "orders", "billing", "mine", "mine", nil},
		{"a set scope without stream and group", "", "", "mine", "mine", nil},
		{"no group", "orders", "", "", "", idem.ErrInvalidOptions},
		{"no stream", "", "billing", "", "", idem.ErrInvalidOptions},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := redisstream.NewGuard(memory.New(), tt.stream, tt.group, idem.Options{Scope: tt.scope})
			if !errors.Is(err, tt.wantErr) || (err == nil && g.Options().Scope != tt.want) {
				t.Fatalf("NewGuard = %v, %v; want scope %q, %v", g, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestDeadLetterOf(t *testing.T) {
	tests := []struct {
		name               string
		values             map[string]any
		wantID, wantReason string
		wantErr            error
	}{
		{"a consumer's dead letter", map[string]any{redisstream.FieldID: "order-1", redisstream.FieldPayload: "b",
			redisstream.FieldStream: "orders", idem.HeaderReason: "conflict"}, "order-1", "conflict", nil},
		{"an entry of the work stream", map[string]any{redisstream.FieldID: "order-2", redisstream.FieldPayload: "b"}, "order-2", "", redisstream.ErrNotDeadLetter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := redisstream.DeadLetterOf(redis.XMessage{ID: "1-0", Values: tt.values})
			if !errors.Is(err, tt.wantErr) || m.ID != tt.wantID || string(m.Payload) != "b" || m.Header(idem.HeaderReason) != tt.wantReason {
				t.Fatalf("DeadLetterOf = %+v, %v; want ID %q, reason %q, %v", m, err, tt.wantID, tt.wantReason, tt.wantErr)
			}
		})
	}
	if err := redisstream.Replay(context.Background(), nil, "dlq", redis.XMessage{ID: "1-0", Values: map[string]any{redisstream.FieldID: "x"}}); !errors.Is(err, redisstream.ErrNotDeadLetter) {
		t.Fatalf("Replay of an entry of the work stream: %v, want ErrNotDeadLetter", err)
	}
}

func TestPublishNeedsID(t *testing.T) {
	if _, err := redisstream.Publish(context.Background(), nil, "orders", "", []byte("b")); !errors.Is(err, idem.ErrNoKey) {
		t.Fatalf("err = %v, want ErrNoKey", err)
	}
}

// TestHandlers: Handle(nil), HandleTx(nil) and a HandleTx whose store has
// no transactions are refused by NewConsumer, before Redis is reached.
func TestHandlers(t *testing.T) {
	g, err := redisstream.NewGuard(memory.New(), "orders", "billing", idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	opts := redisstream.Options{Stream: "orders", Group: "billing", Consumer: "c1", DeadLetterStream: "orders.dlq"}
	tests := []struct {
		name string
		h    redisstream.Handler
		want error
	}{
		{"Handle(nil)", redisstream.Handle(nil), idem.ErrInvalidOptions},
		{"HandleTx(nil)", redisstream.HandleTx[*sql.Tx](nil), idem.ErrInvalidOptions},
		{"HandleTx on a store without transactions", redisstream.HandleTx(func(context.Context, *sql.Tx, *redisstream.Message) ([]byte, error) { return nil, nil }), idem.ErrNoTx},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := redisstream.NewConsumer(rdb, g, tt.h, opts); !errors.Is(err, tt.want) {
				t.Fatalf("NewConsumer: %v, want %v", err, tt.want)
			}
			if err := redisstream.Consume(context.Background(), rdb, g, tt.h, opts); !errors.Is(err, tt.want) {
				t.Fatalf("Consume: %v, want %v", err, tt.want)
			}
		})
	}
	ok := redisstream.Handle(func(context.Context, *redisstream.Message) ([]byte, error) { return nil, nil })
	if _, err := redisstream.NewConsumer(rdb, g, ok, opts); err != nil {
		t.Fatalf("NewConsumer(Handle(fn)): %v", err)
	}
}
