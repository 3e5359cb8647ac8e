package servicebus_test

import (
	"errors"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/servicebus"
)

func TestDeadLetterOf(t *testing.T) {
	str := func(s string) *string { return &s }
	dedup := idem.DedupID("order-1", "fp")
	tests := []struct {
		name       string
		msg        *azservicebus.ReceivedMessage
		wantID     string
		wantReason string // Idem-Reason, else DeadLetterReason
		wantErr    error
	}{
		{"a consumer's dead letter of a Send", &azservicebus.ReceivedMessage{MessageID: dedup, Body: []byte("b"),
			DeadLetterReason: str("conflict"), ApplicationProperties: map[string]any{servicebus.HeaderID: "order-1", idem.HeaderReason: "conflict"}},
			"order-1", "conflict", nil},
		{"a consumer's dead letter of a replay", &azservicebus.ReceivedMessage{MessageID: "order-2~replay-0123456789abcdef", Body: []byte("b"),
			ApplicationProperties: map[string]any{idem.HeaderReason: "permanent"}}, "order-2", "permanent", nil},
		{"Service Bus's own at MaxDeliveryCount", &azservicebus.ReceivedMessage{MessageID: "order-3", Body: []byte("b"),
			DeadLetterReason: str(servicebus.ReasonMaxDeliveryCountExceeded)}, "order-3", servicebus.ReasonMaxDeliveryCountExceeded, nil},
		{"a message of the queue", &azservicebus.ReceivedMessage{MessageID: "order-4", Body: []byte("b")}, "order-4", "", servicebus.ErrNotDeadLetter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := servicebus.DeadLetterOf(tt.msg)
			reason := m.Header(idem.HeaderReason)
			if reason == "" {
				reason = m.Header("DeadLetterReason")
			}
			if !errors.Is(err, tt.wantErr) || m.ID != tt.wantID || reason != tt.wantReason || string(m.Payload) != "b" {
				t.Fatalf("DeadLetterOf = %+v, %v; want ID %q, reason %q, %v", m, err, tt.wantID, tt.wantReason, tt.wantErr)
			}
		})
	}
}
