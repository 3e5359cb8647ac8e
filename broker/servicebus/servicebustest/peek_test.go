package servicebustest_test

import (
	"fmt"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem/broker/servicebus/servicebustest"
)

// PeekMessages browses a queue in sequence order from a sequence number
// on, locked messages included, without locking one or counting a
// delivery: a receive after two peeks gets the first message on its first
// delivery.
func TestPeek(t *testing.T) {
	srv, client := newServer(t)
	if err := srv.CreateQueue("q", servicebustest.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	var msgs []*azservicebus.Message
	for i := range 3 {
		id := fmt.Sprint("m", i)
		msgs = append(msgs, &azservicebus.Message{MessageID: &id, Body: []byte(id),
			ApplicationProperties: map[string]any{"n": int64(i)}})
	}
	send(t, client, "q", msgs...)
	r, err := client.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	locked := receiveOne(t, r) // m0, locked: still browsed
	all, err := r.PeekMessages(ctxT(t), 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 {
		t.Fatalf("peeked %d messages, want 3", len(all))
	}
	for i, m := range all {
		if m.MessageID != fmt.Sprint("m", i) || m.SequenceNumber == nil || m.ApplicationProperties["n"] != int64(i) {
			t.Fatalf("peeked #%d: id %s seq %v props %v", i, m.MessageID, m.SequenceNumber, m.ApplicationProperties)
		}
	}
	from := *all[1].SequenceNumber
	rest, err := r.PeekMessages(ctxT(t), 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
	if err != nil || len(rest) != 2 || rest[0].MessageID != "m1" {
		t.Fatalf("peek from %d: %d messages (%v)", from, len(rest), err)
	}
	if err := r.CompleteMessage(ctxT(t), locked, nil); err != nil {
		t.Fatal(err)
	}
	if m := receiveOne(t, r); m.MessageID != "m1" || m.DeliveryCount != 1 {
		t.Fatalf("after peeks: received %s with delivery count %d, want m1 on its first delivery", m.MessageID, m.DeliveryCount)
	}
	past := *all[2].SequenceNumber + 1
	none, err := r.PeekMessages(ctxT(t), 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &past})
	if err != nil || len(none) != 0 {
		t.Fatalf("peek past the last message: %d messages (%v), want none", len(none), err)
	}
}
