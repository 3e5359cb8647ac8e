package servicebus_test

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/servicebus"
	"github.com/idemgo/idem/store/memory"
)

// TestSendDuplicateDetection: a producer retry of the same content is
// dropped by the queue's duplicate detection; the id reused with other
// content is not, and the consumer dead-letters it as a conflict, with
// Service Bus's and idem's reason; Replay sends the dead letter back, and
// duplicate detection keeps it.
func TestSendDuplicateDetection(t *testing.T) {
	srv, client, s := dedupQueue(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, body := range []string{`{"amount":10}`, `{"amount":10}`, `{"amount":99}`} {
		if err := servicebus.Send(ctx, s, "order-1", &azservicebus.Message{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := srv.Stats("orders"); st.Active != 2 {
		t.Fatalf("%+v: want 2 (the retry dropped, the reuse kept)", st)
	}
	if err := servicebus.Send(ctx, s, "", &azservicebus.Message{}); err == nil {
		t.Fatal("Send without an id succeeded")
	}

	g, err := servicebus.NewGuard(memory.New(), servicebus.EntityPath("orders"), idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	applied := make(chan string, 4)
	dead := make(chan broker.Report, 1)
	r, _ := client.NewReceiverForQueue("orders", nil)
	c, err := servicebus.NewConsumer(r, g, servicebus.Handle(func(ctx context.Context, m *azservicebus.ReceivedMessage) ([]byte, error) {
		applied <- servicebus.MessageOf(m).ID
		return nil, nil
	}), servicebus.Options{EntityPath: "orders", Hooks: broker.Hooks[*azservicebus.ReceivedMessage]{
		OnDeadLetter: func(_ context.Context, _ *azservicebus.ReceivedMessage, r broker.Report) { dead <- r },
	}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	if id := <-applied; id != "order-1" {
		t.Fatalf("applied %q", id)
	}
	if r := <-dead; r.Reason != "conflict" {
		t.Fatalf("dead letter reason %q", r.Reason)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The consumer is stopped: its owner closes the receiver, so that a
	// receive cut short by the stop holds no credit for the replay below
	// (the link's credit is the client's until then, and would lock it).
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	dlq, _ := client.NewReceiverForQueue("orders", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	msgs, err := dlq.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("dead-letter queue: %v, %d messages", err, len(msgs))
	}
	dl := msgs[0]
	if *dl.DeadLetterReason != "conflict" || dl.ApplicationProperties[idem.HeaderReason] != "conflict" ||
		dl.ApplicationProperties[servicebus.HeaderSequenceNumber] == nil || servicebus.MessageOf(dl).ID != "order-1" {
		t.Fatalf("dead letter %+v %v", dl, dl.ApplicationProperties)
	}
	if err := servicebus.Replay(ctx, s, dl); err != nil {
		t.Fatal(err)
	}
	if err := dlq.CompleteMessage(ctx, dl, nil); err != nil {
		t.Fatal(err)
	}
	// The replay has a MessageID of its own: inside the window that
	// remembers the original's, Service Bus keeps it.
	if st, _ := srv.Stats("orders"); st.Active != 1 || st.DeadLettered != 0 {
		t.Fatalf("after replay inside the window: %+v, want the replay kept", st)
	}
}
