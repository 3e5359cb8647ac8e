package servicebustest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem/broker/servicebus/servicebustest"
)

// A message with a ScheduledEnqueueTime, sent or scheduled, is not
// delivered before it: it is counted as scheduled, peeked with state
// scheduled, and received once its time has come; a cancelled one never.
func TestScheduledMessages(t *testing.T) {
	srv, client := newServer(t)
	if err := srv.CreateQueue("q", servicebustest.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(300 * time.Millisecond).Truncate(time.Millisecond) // AMQP timestamps are in ms
	send(t, client, "q", &azservicebus.Message{MessageID: strPtr("later"), ScheduledEnqueueTime: &at})
	s, err := client.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	seqs, err := s.ScheduleMessages(ctxT(t), []*azservicebus.Message{{MessageID: strPtr("cancelled")}}, at, nil)
	if err != nil || len(seqs) != 1 {
		t.Fatalf("ScheduleMessages: %v %v", seqs, err)
	}
	if st, _ := srv.Stats("q"); st.Scheduled != 2 || st.Active != 0 {
		t.Fatalf("before the time: %+v, want 2 scheduled", st)
	}
	r, err := client.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	peeked, err := r.PeekMessages(ctxT(t), 10, nil)
	if err != nil || len(peeked) != 2 || peeked[0].State != azservicebus.MessageStateScheduled {
		t.Fatalf("peek of scheduled messages: %d, %v", len(peeked), err)
	}
	if err := s.CancelScheduledMessages(ctxT(t), seqs, nil); err != nil {
		t.Fatal(err)
	}
	m := receiveOne(t, r) // waits for the scheduled time
	if m.MessageID != "later" || time.Now().Before(at) || m.EnqueuedTime.Before(at.Add(-time.Millisecond)) {
		t.Fatalf("received %s at %v enqueued %v, scheduled for %v", m.MessageID, time.Now(), m.EnqueuedTime, at)
	}
	if st, _ := srv.Stats("q"); st.Scheduled != 0 || st.Active != 0 {
		t.Fatalf("after: %+v, the cancelled message still there", st)
	}
}

// A message whose time to live has passed is never delivered: dropped,
// or moved to the dead-letter queue with TTLExpiredException where the
// entity dead-letters on expiry. The entity's default applies to a
// message without a shorter time to live of its own.
func TestTimeToLive(t *testing.T) {
	for _, dl := range []bool{false, true} {
		srv, client := newServer(t)
		if err := srv.CreateQueue("q", servicebustest.QueueOptions{
			DefaultMessageTimeToLive: time.Hour, DeadLetteringOnMessageExpiration: dl}); err != nil {
			t.Fatal(err)
		}
		short := 200 * time.Millisecond
		send(t, client, "q", &azservicebus.Message{MessageID: strPtr("expires"), TimeToLive: &short},
			&azservicebus.Message{MessageID: strPtr("default-ttl")})
		deadline := time.Now().Add(10 * time.Second)
		for {
			st, _ := srv.Stats("q")
			if st.Active == 1 && (!dl || st.DeadLettered == 1) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("dead-lettering %v: %+v, the message did not expire", dl, st)
			}
			time.Sleep(20 * time.Millisecond)
		}
		r, _ := client.NewReceiverForQueue("q", nil)
		if m := receiveOne(t, r); m.MessageID != "default-ttl" || m.ExpiresAt == nil || m.ExpiresAt.Before(time.Now().Add(time.Minute)) {
			t.Fatalf("received %s, want the unexpired one", m.MessageID)
		}
		if !dl {
			continue
		}
		dlq, _ := client.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
		d := receiveOne(t, dlq)
		if d.MessageID != "expires" || d.DeadLetterReason == nil || *d.DeadLetterReason != "TTLExpiredException" || d.DeadLetterSource != nil {
			t.Fatalf("expired dead letter %s reason %v source %v", d.MessageID, d.DeadLetterReason, d.DeadLetterSource)
		}
	}
}

// A deferred message is no longer delivered; it is received by its
// sequence number, locked, and settled through $management; a sequence
// number without a deferred message is refused at once.
func TestDeferral(t *testing.T) {
	srv, client := newServer(t)
	if err := srv.CreateQueue("q", servicebustest.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	send(t, client, "q", &azservicebus.Message{MessageID: strPtr("d1"), Body: []byte("x")}, &azservicebus.Message{MessageID: strPtr("n2")})
	r, _ := client.NewReceiverForQueue("q", nil)
	m := receiveOne(t, r)
	if err := r.DeferMessage(ctxT(t), m, nil); err != nil {
		t.Fatal(err)
	}
	if next := receiveOne(t, r); next.MessageID != "n2" {
		t.Fatalf("after deferring d1 received %s", next.MessageID)
	}
	got, err := r.ReceiveDeferredMessages(ctxT(t), []int64{*m.SequenceNumber}, nil)
	if err != nil || len(got) != 1 || got[0].MessageID != "d1" || string(got[0].Body) != "x" || got[0].State != azservicebus.MessageStateDeferred {
		t.Fatalf("ReceiveDeferredMessages: %v %v", got, err)
	}
	if got[0].LockToken == ([16]byte{}) || got[0].LockedUntil == nil {
		t.Fatal("a deferred message received in PeekLock has no lock")
	}
	if err := r.CompleteMessage(ctxT(t), got[0], nil); err != nil {
		t.Fatalf("complete a deferred message: %v", err)
	}
	if st, _ := srv.Stats("q"); st.Deferred != 0 || st.Locked != 1 {
		t.Fatalf("after completing the deferred message: %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := r.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil); err == nil || ctx.Err() != nil {
		t.Fatalf("receive a sequence number with no deferred message: %v (context %v), want an immediate error", err, ctx.Err())
	}
}

// What servicebustest does not model is refused within a second, with an
// error naming the operation, not retried as a lost connection would be.
func TestUnmodelledRefusedAtOnce(t *testing.T) {
	srv, client := newServer(t)
	if err := srv.CreateTopic("t", servicebustest.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := srv.CreateSubscription("t", "s", servicebustest.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := client.NewSender("t", nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func(ctx context.Context) error{
		"schedule-message on a topic": func(ctx context.Context) error {
			_, err := s.ScheduleMessages(ctx, []*azservicebus.Message{{MessageID: strPtr("x")}}, time.Now().Add(time.Hour), nil)
			return err
		},
		"get-message-sessions": func(ctx context.Context) error {
			pager := client.NewListSessionsForSubscriptionPager("t", "s", nil)
			_, err := pager.NextPage(ctx)
			return err
		},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := call(ctx)
		cancel()
		var sbErr *azservicebus.Error
		if err == nil || errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &sbErr) || !strings.Contains(err.Error(), name) {
			t.Fatalf("%s: %v, want a refusal naming it within a second", name, err)
		}
	}
}
