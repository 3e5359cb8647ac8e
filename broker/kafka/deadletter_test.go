package kafka_test

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/kafka"
)

func TestDeadLetterOf(t *testing.T) {
	orig := kafka.Record("orders", "k", "order-1", []byte(`{"a":1}`), kafka.WithHeader("content-type", "application/json"))
	orig.Partition, orig.Offset = 2, 40
	res := idem.Result{Outcome: idem.OutcomeConflict, Key: idem.Key{Scope: "billing", ID: "order-1"}}
	h := broker.DeadLetterHeaders(context.Background(), nil, kafka.MessageOf(orig), res, idem.Permanent(errors.New("bad")), "")
	dl := kafka.DeadLetter("orders.dlq", orig, h)
	noID := kafka.DeadLetter("orders.dlq", &kgo.Record{Topic: "orders", Value: []byte("x")}, h)

	tests := []struct {
		name                  string
		rec                   *kgo.Record
		wantID, wantReason    string
		wantPayload, wantType string
		wantErr               error
	}{
		{"a consumer's dead letter", dl, "order-1", "permanent", `{"a":1}`, "application/json", nil},
		{"the dead letter of a record without an id", noID, "", "permanent", "x", "", nil},
		{"a record of the work topic", orig, "order-1", "", `{"a":1}`, "application/json", kafka.ErrNotDeadLetter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := kafka.DeadLetterOf(tt.rec)
			if !errors.Is(err, tt.wantErr) || m.ID != tt.wantID || m.Header(idem.HeaderReason) != tt.wantReason ||
				string(m.Payload) != tt.wantPayload || m.ContentType != tt.wantType {
				t.Fatalf("DeadLetterOf = %+v, %v; want ID %q, reason %q, payload %q, type %q, %v",
					m, err, tt.wantID, tt.wantReason, tt.wantPayload, tt.wantType, tt.wantErr)
			}
			if tt.wantErr == nil && m.Header(kafka.HeaderOriginalTopic) != "orders" {
				t.Fatalf("Headers %v lack %s", m.Headers, kafka.HeaderOriginalTopic)
			}
		})
	}
}

func TestPublishNeedsID(t *testing.T) {
	if err := kafka.Publish(context.Background(), nil, "orders", "k", " ", nil); !errors.Is(err, idem.ErrNoKey) {
		t.Fatalf("err = %v, want ErrNoKey", err)
	}
}
