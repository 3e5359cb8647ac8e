package outboxservicebus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/servicebus"
	"github.com/idemgo/idem/broker/servicebus/servicebustest"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/internal/integration/outboxenv"
	"github.com/idemgo/idem/outbox/outboxtest"
	outboxservicebus "github.com/idemgo/idem/outbox/servicebus"
)

// TestRelay runs the relay's scenarios through Service Bus over an
// in-memory outbox (outbox/internal/integration/matrix runs them on every
// database).
func TestRelay(t *testing.T) {
	outboxtest.RunRelay(t, outboxenv.Memory, outboxenv.ServiceBusBroker)
}

func rec(id, dest, payload string) outbox.Record {
	return outbox.Record{Seq: 1, Message: outbox.Message{ID: id, Destination: dest, Payload: []byte(payload),
		Headers: map[string]string{"Content-Type": "application/json", "traceparent": "00-abc-def-01"}}}
}

func newPublisher(t *testing.T, sb *outboxenv.ServiceBus, opts outboxservicebus.Options) *outboxservicebus.Publisher {
	t.Helper()
	p, err := outboxservicebus.New(sb.Client, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

func publish(t *testing.T, p *outboxservicebus.Publisher, recs ...outbox.Record) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return p.Publish(ctx, recs)
}

func receive(t *testing.T, next func(context.Context) (outboxenv.Received, error)) outboxenv.Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := next(ctx)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return r
}

func stats(t *testing.T, sb *outboxenv.ServiceBus, q string) servicebustest.Stats {
	t.Helper()
	st, err := sb.Server.Stats(q)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// The consumer side reads what the publisher wrote where it looks by
// default: the stable id in Idem-Id, MessageID the dedup id of the id and
// the payload's fingerprint, the headers as application properties,
// Content-Type as ContentType.
func TestWhereTheConsumerLooks(t *testing.T) {
	sb := outboxenv.NewServiceBus(t)
	q := sb.Queue(t, "orders", servicebustest.QueueOptions{})
	p := newPublisher(t, sb, outboxservicebus.Options{})
	r := rec("order-1-charged", q, `{"amount":42}`)
	if errs := publish(t, p, r); errs[0] != nil {
		t.Fatal(errs[0])
	}
	got := receive(t, sb.Receive(t, q))
	fp, _ := idem.PayloadFingerprint(idem.Message{Payload: r.Payload})
	if m := got.Msg; m.ID != r.ID || string(m.Payload) != string(r.Payload) || m.Header("traceparent") != "00-abc-def-01" || m.ContentType != "application/json" {
		t.Errorf("MessageOf: %+v", m)
	}
	if got.Raw.MessageID != idem.DedupID(r.ID, fp) {
		t.Errorf("MessageID %q, want idem.DedupID %q", got.Raw.MessageID, idem.DedupID(r.ID, fp))
	}
	if got.Raw.ApplicationProperties[servicebus.HeaderID] != r.ID {
		t.Errorf("Idem-Id %v", got.Raw.ApplicationProperties[servicebus.HeaderID])
	}
	if _, ok := got.Raw.ApplicationProperties["Content-Type"]; ok {
		t.Errorf("Content-Type sent as an application property too: %v", got.Raw.ApplicationProperties)
	}
	if got.Raw.ScheduledEnqueueTime != nil || got.Raw.SessionID != nil {
		t.Errorf("a plain record scheduled (%v) or in a session (%v)", got.Raw.ScheduledEnqueueTime, got.Raw.SessionID)
	}
}

// Duplicate detection drops a repeat of the same id and content (the relay
// publishing again after a crash), and never an id reused with other
// content; within one Publish as across them.
func TestDuplicateDetectionNeverHidesAConflict(t *testing.T) {
	sb := outboxenv.NewServiceBus(t)
	q := sb.Queue(t, "orders", servicebustest.QueueOptions{RequiresDuplicateDetection: true})
	p := newPublisher(t, sb, outboxservicebus.Options{})
	for _, batch := range [][]outbox.Record{
		{rec("x", q, "first")}, {rec("x", q, "first")}, {rec("x", q, "other content"), rec("x", q, "first")},
	} {
		for i, err := range publish(t, p, batch...) {
			if err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
		}
	}
	if st := stats(t, sb, q); st.Active != 2 {
		t.Fatalf("the queue holds %d messages, want 2: the repeats dropped, the conflict kept", st.Active)
	}
}

// A record with NotBefore is sent as a scheduled message: Service Bus
// holds it until then, and delivers it with its ScheduledEnqueueTime. The
// records beside it go at once.
func TestNotBeforeScheduled(t *testing.T) {
	sb := outboxenv.NewServiceBus(t)
	q := sb.Queue(t, "orders", servicebustest.QueueOptions{})
	p := newPublisher(t, sb, outboxservicebus.Options{})
	at := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
	later := rec("later", q, "reminder")
	later.NotBefore = at
	for i, err := range publish(t, p, later, rec("now", q, "at once")) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if st := stats(t, sb, q); st.Scheduled != 1 || st.Active != 1 {
		t.Fatalf("queue %+v, want 1 scheduled and 1 available", st)
	}
	next := sb.Receive(t, q)
	if first := receive(t, next); first.Msg.ID != "now" {
		t.Fatalf("first delivery %s, want the unscheduled record", first.Msg.ID)
	}
	second := receive(t, next)
	if second.Msg.ID != "later" {
		t.Fatalf("second delivery %s, want the scheduled one", second.Msg.ID)
	}
	if now := time.Now(); now.Before(at) {
		t.Errorf("the scheduled record was delivered at %v, before its NotBefore %v", now, at)
	}
	if s := second.Raw.ScheduledEnqueueTime; s == nil || !s.Equal(at) {
		t.Errorf("ScheduledEnqueueTime %v, want %v", s, at)
	}
}

// One Publish with many records to several destinations sends each
// destination's in as few batches as fit, and every record arrives once.
func TestBatchesAcrossDestinations(t *testing.T) {
	sb := outboxenv.NewServiceBus(t)
	qs := []string{sb.Queue(t, "a", servicebustest.QueueOptions{}), sb.Queue(t, "b", servicebustest.QueueOptions{})}
	p := newPublisher(t, sb, outboxservicebus.Options{})
	var recs []outbox.Record
	for i := range 300 {
		payload := fmt.Sprintf("small %d", i)
		if i%50 == 0 {
			payload = strings.Repeat("x", 300<<10) // several of these fill a batch
		}
		recs = append(recs, rec(fmt.Sprintf("m%03d", i), qs[i%2], payload))
	}
	for i, err := range publish(t, p, recs...) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	for _, q := range qs {
		if st := stats(t, sb, q); st.Active != 150 {
			t.Errorf("queue %s holds %d messages, want 150", q, st.Active)
		}
	}
}

// Records Service Bus cannot take are rejected, each alone; those beside
// them go. An entity that does not exist is the operator's to create: its
// records are retried.
func TestRejections(t *testing.T) {
	sb := outboxenv.NewServiceBus(t)
	q := sb.Queue(t, "orders", servicebustest.QueueOptions{})
	p := newPublisher(t, sb, outboxservicebus.Options{})
	errs := publish(t, p,
		rec("big", q, strings.Repeat("x", outboxenv.SBMaxMessageSize)),
		rec("fine", q, "ok"),
		rec(strings.Repeat("i", 120), q, "an id over MessageID's 128 characters with the digest"),
	)
	if !errors.Is(errs[0], outbox.ErrRejected) || !errors.Is(errs[0], azservicebus.ErrMessageTooLarge) {
		t.Errorf("over the maximum message size: %v, want ErrRejected", errs[0])
	}
	if errs[1] != nil {
		t.Errorf("a good message beside them: %v", errs[1])
	}
	if !errors.Is(errs[2], outbox.ErrRejected) || !strings.Contains(errs[2].Error(), "128") {
		t.Errorf("a MessageID over 128 characters: %v, want ErrRejected naming the limit", errs[2])
	}
	if st := stats(t, sb, q); st.Active != 1 {
		t.Errorf("the queue holds %d messages, want the good one", st.Active)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if errs := p.Publish(ctx, []outbox.Record{rec("nowhere", "no-such-queue", "x")}); errs[0] == nil || errors.Is(errs[0], outbox.ErrRejected) {
		t.Errorf("no such queue: %v, want a retryable error", errs[0])
	}
	// A session entity refuses messages without a SessionID: the
	// publisher's Options lack Sessions, which the operator fixes; retried
	// (and parked at RelayOptions.MaxAttempts), answered at once.
	sq := sb.Queue(t, "sessions", servicebustest.QueueOptions{RequiresSession: true})
	if errs := p.Publish(ctx, []outbox.Record{rec("sessionless", sq, "x")}); errs[0] == nil || errors.Is(errs[0], outbox.ErrRejected) {
		t.Errorf("no SessionID for a session queue: %v, want a retryable error", errs[0])
	}
}

// With Options.Sessions a record's SessionID is its routing key, else its
// ordering key; a session receiver gets its session's records in order. A
// record with neither is rejected: a session entity refuses it.
func TestSessions(t *testing.T) {
	sb := outboxenv.NewServiceBus(t)
	q := sb.Queue(t, "orders", servicebustest.QueueOptions{RequiresSession: true})
	p := newPublisher(t, sb, outboxservicebus.Options{Sessions: true})
	routed := rec("r1", q, "routed")
	routed.RoutingKey, routed.OrderingKey = "customer-7", "order-1"
	keyed := rec("k1", q, "keyed")
	keyed.OrderingKey = "order-2"
	errs := publish(t, p, routed, keyed, rec("none", q, "no key"))
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("keyed records: %v, %v", errs[0], errs[1])
	}
	if !errors.Is(errs[2], outbox.ErrRejected) {
		t.Errorf("a record without a key for its session: %v, want ErrRejected", errs[2])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for session, id := range map[string]string{"customer-7": "r1", "order-2": "k1"} {
		sr, err := sb.Client.AcceptSessionForQueue(ctx, q, session, nil)
		if err != nil {
			t.Fatalf("accept %s: %v", session, err)
		}
		msgs, err := sr.ReceiveMessages(ctx, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 1 || servicebus.MessageOf(msgs[0]).ID != id {
			t.Errorf("session %s: %d messages, want %s", session, len(msgs), id)
		}
		sr.Close(ctx)
	}
}

// After Close, Publish fails every record with ErrClosed (retried by the
// relay, never lost).
func TestClosed(t *testing.T) {
	sb := outboxenv.NewServiceBus(t)
	q := sb.Queue(t, "orders", servicebustest.QueueOptions{})
	p := newPublisher(t, sb, outboxservicebus.Options{})
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if errs := publish(t, p, rec("late", q, "x")); !errors.Is(errs[0], outboxservicebus.ErrClosed) || outbox.IsRejected(errs[0]) {
		t.Errorf("publish after Close: %v, want ErrClosed, not rejected", errs[0])
	}
	if _, err := outboxservicebus.New(nil, outboxservicebus.Options{}); !errors.Is(err, outbox.ErrInvalidOptions) {
		t.Errorf("New with no client: %v", err)
	}
}
