package integration_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	natsidem "github.com/idemgo/idem/broker/nats"
)

// TestDeadLetterOf: a dead letter reads with its original's id, whichever
// header carried it, and with idem's headers; a message of the work stream
// is no dead letter.
func TestDeadLetterOf(t *testing.T) {
	dl := func(h nats.Header) fakeMsg {
		h.Set(natsidem.HeaderSubject, "orders.x")
		h.Set(idem.HeaderReason, "conflict")
		h.Set(jetstream.MsgIDHeader, "idem-dlq:c:5") // the dead letter's own
		return fakeMsg{h: h, data: []byte("{}")}
	}
	orig := natsidem.HeaderOriginalPrefix + jetstream.MsgIDHeader
	tests := []struct {
		name       string
		msg        fakeMsg
		wantID     string
		wantReason string
		wantErr    error
	}{
		{"sent by Publish", dl(nats.Header{natsidem.HeaderID: {"order-1"}, orig: {idem.DedupID("order-1", "fp")}}), "order-1", "conflict", nil},
		{"sent with a plain Nats-Msg-Id", dl(nats.Header{orig: {"w-2"}}), "w-2", "conflict", nil},
		{"a replay's", dl(nats.Header{orig: {"w-2~replay-0123456789abcdef"}}), "w-2", "conflict", nil},
		{"sent without an id", dl(nats.Header{}), "", "conflict", nil},
		{"a message of the work stream", fakeMsg{h: nats.Header{jetstream.MsgIDHeader: {"x"}}, data: []byte("{}")}, "x", "", natsidem.ErrNotDeadLetter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := natsidem.DeadLetterOf(tt.msg)
			if !errors.Is(err, tt.wantErr) || m.ID != tt.wantID || m.Header(idem.HeaderReason) != tt.wantReason || string(m.Payload) != "{}" {
				t.Fatalf("DeadLetterOf = %+v, %v; want ID %q, reason %q, %v", m, err, tt.wantID, tt.wantReason, tt.wantErr)
			}
		})
	}
}
