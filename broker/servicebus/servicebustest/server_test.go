package servicebustest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem/broker/servicebus/servicebustest"
)

func newServer(t *testing.T) (*servicebustest.Server, *azservicebus.Client) {
	t.Helper()
	srv, err := servicebustest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	client, err := azservicebus.NewClientFromConnectionString(srv.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(context.Background()) })
	return srv, client
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func send(t *testing.T, client *azservicebus.Client, entity string, msgs ...*azservicebus.Message) {
	t.Helper()
	s, err := client.NewSender(entity, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	for _, m := range msgs {
		if err := s.SendMessage(ctxT(t), m, nil); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
}

func receiveOne(t *testing.T, r *azservicebus.Receiver) *azservicebus.ReceivedMessage {
	t.Helper()
	msgs, err := r.ReceiveMessages(ctxT(t), 1, nil)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	if len(msgs) != 1 {
		t.Fatalf("received %d messages, want 1", len(msgs))
	}
	return msgs[0]
}

func TestSendReceiveComplete(t *testing.T) {
	srv, client := newServer(t)
	if err := srv.CreateQueue("orders", servicebustest.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	send(t, client, "orders", &azservicebus.Message{
		MessageID:             strPtr("order-1"),
		Body:                  []byte(`{"amount":10}`),
		ApplicationProperties: map[string]any{"tenant": "acme", "n": int64(7)},
	})
	r, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	m := receiveOne(t, r)
	if m.MessageID != "order-1" || string(m.Body) != `{"amount":10}` || m.DeliveryCount != 1 {
		t.Fatalf("got id %q body %q delivery count %d", m.MessageID, m.Body, m.DeliveryCount)
	}
	if m.ApplicationProperties["tenant"] != "acme" || m.ApplicationProperties["n"] != int64(7) {
		t.Fatalf("application properties %v", m.ApplicationProperties)
	}
	if m.SequenceNumber == nil || m.LockedUntil == nil || m.EnqueuedTime == nil {
		t.Fatalf("no sequence number, lock or enqueued time: %+v", m)
	}
	if err := r.CompleteMessage(ctxT(t), m, nil); err != nil {
		t.Fatalf("complete: %v", err)
	}
	st, _ := srv.Stats("orders")
	if st != (servicebustest.Stats{}) {
		t.Fatalf("after complete: %+v", st)
	}
}

func strPtr(s string) *string { return &s }

func TestAbandonRedeliversThenDeadLetters(t *testing.T) {
	srv, client := newServer(t)
	srv.CreateQueue("q", servicebustest.QueueOptions{MaxDeliveryCount: 3})
	send(t, client, "q", &azservicebus.Message{MessageID: strPtr("a"), Body: []byte("x")})
	r, _ := client.NewReceiverForQueue("q", nil)
	for i := 1; i <= 3; i++ {
		m := receiveOne(t, r)
		if int(m.DeliveryCount) != i {
			t.Fatalf("delivery %d: DeliveryCount %d", i, m.DeliveryCount)
		}
		if err := r.AbandonMessage(ctxT(t), m, nil); err != nil {
			t.Fatal(err)
		}
	}
	dlq, _ := client.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	d := receiveOne(t, dlq)
	if d.MessageID != "a" || d.DeadLetterReason == nil || *d.DeadLetterReason != "MaxDeliveryCountExceeded" {
		t.Fatalf("dead letter %q reason %v", d.MessageID, d.DeadLetterReason)
	}
	// Service Bus sets DeadLetterSource only on a message dead-lettered
	// after auto-forwarding.
	if d.DeadLetterSource != nil {
		t.Fatalf("dead-letter source %q, want none", *d.DeadLetterSource)
	}
}

func TestDeadLetterWithReasonAndProperties(t *testing.T) {
	srv, client := newServer(t)
	srv.CreateQueue("q", servicebustest.QueueOptions{})
	send(t, client, "q", &azservicebus.Message{MessageID: strPtr("a"), Body: []byte("x"), ApplicationProperties: map[string]any{"keep": "me"}})
	r, _ := client.NewReceiverForQueue("q", nil)
	m := receiveOne(t, r)
	err := r.DeadLetterMessage(ctxT(t), m, &azservicebus.DeadLetterOptions{
		Reason: strPtr("conflict"), ErrorDescription: strPtr("same key, other content"),
		PropertiesToModify: map[string]any{"Idem-Reason": "conflict"},
	})
	if err != nil {
		t.Fatal(err)
	}
	dlq, _ := client.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	d := receiveOne(t, dlq)
	if *d.DeadLetterReason != "conflict" || *d.DeadLetterErrorDescription != "same key, other content" ||
		d.ApplicationProperties["Idem-Reason"] != "conflict" || d.ApplicationProperties["keep"] != "me" {
		t.Fatalf("dead letter %+v, properties %v", d, d.ApplicationProperties)
	}
	if err := dlq.CompleteMessage(ctxT(t), d, nil); err != nil {
		t.Fatal(err)
	}
	if st, _ := srv.Stats("q"); st.DeadLettered != 0 {
		t.Fatalf("dead-letter queue after complete: %+v", st)
	}
}

// TestLockExpiryRedelivers: a message whose lock runs out is delivered
// again with DeliveryCount + 1, and the first lock's complete fails as
// lock lost.
func TestLockExpiryRedelivers(t *testing.T) {
	srv, client := newServer(t)
	srv.CreateQueue("q", servicebustest.QueueOptions{LockDuration: 200 * time.Millisecond})
	send(t, client, "q", &azservicebus.Message{MessageID: strPtr("a"), Body: []byte("x")})
	r, _ := client.NewReceiverForQueue("q", nil)
	first := receiveOne(t, r)
	second := receiveOne(t, r) // only after the first lock expired
	if second.DeliveryCount != 2 || second.MessageID != "a" {
		t.Fatalf("redelivery: id %q count %d", second.MessageID, second.DeliveryCount)
	}
	err := r.CompleteMessage(ctxT(t), first, nil)
	var sbErr *azservicebus.Error
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeLockLost {
		t.Fatalf("complete under an expired lock: %v, want lock lost", err)
	}
	if err := r.CompleteMessage(ctxT(t), second, nil); err != nil {
		t.Fatal(err)
	}
}

func TestRenewLock(t *testing.T) {
	srv, client := newServer(t)
	srv.CreateQueue("q", servicebustest.QueueOptions{LockDuration: 2 * time.Second})
	send(t, client, "q", &azservicebus.Message{MessageID: strPtr("a"), Body: []byte("x")})
	r, _ := client.NewReceiverForQueue("q", nil)
	m := receiveOne(t, r)
	before := *m.LockedUntil
	if err := r.RenewMessageLock(ctxT(t), m, nil); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if m.LockedUntil.Before(before) {
		t.Fatalf("locked until %v, before %v", m.LockedUntil, before)
	}
	if err := r.CompleteMessage(ctxT(t), m, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.RenewMessageLock(ctxT(t), m, nil); err == nil {
		t.Fatal("renewing the lock of a completed message succeeded")
	}
}

func TestDuplicateDetection(t *testing.T) {
	srv, client := newServer(t)
	srv.CreateQueue("q", servicebustest.QueueOptions{RequiresDuplicateDetection: true})
	send(t, client, "q",
		&azservicebus.Message{MessageID: strPtr("a"), Body: []byte("1")},
		&azservicebus.Message{MessageID: strPtr("a"), Body: []byte("retry")},
		&azservicebus.Message{MessageID: strPtr("b"), Body: []byte("2")})
	if st, _ := srv.Stats("q"); st.Active != 2 {
		t.Fatalf("%+v, want 2 active (the retry dropped)", st)
	}
}

func TestTopicSubscriptions(t *testing.T) {
	srv, client := newServer(t)
	srv.CreateTopic("events", servicebustest.QueueOptions{})
	srv.CreateSubscription("events", "billing", servicebustest.QueueOptions{})
	srv.CreateSubscription("events", "mail", servicebustest.QueueOptions{})
	send(t, client, "events", &azservicebus.Message{MessageID: strPtr("e1"), Body: []byte("x")})
	for _, sub := range []string{"billing", "mail"} {
		r, err := client.NewReceiverForSubscription("events", sub, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := receiveOne(t, r)
		if m.MessageID != "e1" {
			t.Fatalf("%s got %q", sub, m.MessageID)
		}
		if err := r.CompleteMessage(ctxT(t), m, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBatchAndManyMessages(t *testing.T) {
	srv, client := newServer(t)
	srv.CreateQueue("q", servicebustest.QueueOptions{})
	s, _ := client.NewSender("q", nil)
	defer s.Close(context.Background())
	const n = 300
	b, err := s.NewMessageBatch(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := b.AddMessage(&azservicebus.Message{MessageID: strPtr(fmt.Sprint(i)), Body: make([]byte, 100)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SendMessageBatch(ctxT(t), b, nil); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 200_000) // several frames
	if err := s.SendMessage(ctxT(t), &azservicebus.Message{MessageID: strPtr("big"), Body: big}, nil); err != nil {
		t.Fatal(err)
	}
	r, _ := client.NewReceiverForQueue("q", nil)
	seen := 0
	for seen < n+1 {
		msgs, err := r.ReceiveMessages(ctxT(t), 50, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if m.MessageID == "big" && len(m.Body) != len(big) {
				t.Fatalf("big body %d bytes", len(m.Body))
			}
			if err := r.CompleteMessage(ctxT(t), m, nil); err != nil {
				t.Fatal(err)
			}
			seen++
		}
	}
	if st, _ := srv.Stats("q"); st != (servicebustest.Stats{}) {
		t.Fatalf("left: %+v", st)
	}
}
