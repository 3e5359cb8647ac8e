package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgo/idem"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/store/memory"
	amqp "github.com/rabbitmq/amqp091-go"
)

func fp(t *testing.T, f idem.FingerprintFunc, m idem.Message) string {
	t.Helper()
	s, err := f(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPublishConflictDeadLettered: Publish gives the
// rabbitmq-message-deduplication plugin's header the id with a digest of
// the content (so the plugin, where enabled, collapses retries of the same
// content and never an id reused with other content) and stamps the time.
// RabbitMQ enqueues all three copies; the consumer processes the first,
// skips the retry and dead-letters the conflict with the stored record's
// fingerprint, state and first-claim time beside the message's, and the
// original's properties and headers as they were.
func TestPublishConflictDeadLettered(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pub := e.channel(t)
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	a, b := []byte(`{"order":7,"amount":5,"at":"10:00"}`), []byte(`{"order":7,"amount":500,"at":"10:00"}`)
	byOrder := idem.FieldsFingerprint("order", "amount")
	for i, body := range [][]byte{a, a, b} {
		if err := amqpidem.Publish(ctx, pub, "", e.queue, "order-7", amqp.Publishing{Body: body, Headers: amqp.Table{"tenant": "acme"}},
			amqpidem.WithFingerprint(byOrder), amqpidem.WithHeader("x-copy", int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	g, err := amqpidem.NewGuard(memory.New(), e.queue, idem.Options{Fingerprint: byOrder})
	if err != nil {
		t.Fatal(err)
	}
	results, stop := e.consume(t, g, amqpidem.Handle(func(context.Context, amqp.Delivery) ([]byte, error) { return nil, nil }),
		amqpidem.Options{Queue: e.queue})
	var got []result
	for range 3 {
		got = append(got, <-results)
	}
	stop()
	for i, want := range []idem.Outcome{idem.OutcomeProcessed, idem.OutcomeDuplicate, idem.OutcomeConflict} {
		if got[i].r.Result.Outcome != want {
			t.Fatalf("copy %d: report %+v, want %v", i, got[i].r, want)
		}
		wantDedup := idem.DedupID("order-7", fp(t, byOrder, idem.Message{Payload: [][]byte{a, a, b}[i]}))
		if h := amqpidem.HeaderString(got[i].d.Headers[amqpidem.HeaderDedup]); h != wantDedup || got[i].d.Timestamp.IsZero() {
			t.Fatalf("copy %d: %s = %q (want %q), timestamp %v", i, amqpidem.HeaderDedup, h, wantDedup, got[i].d.Timestamp)
		}
	}
	if amqpidem.HeaderString(got[0].d.Headers[amqpidem.HeaderDedup]) == amqpidem.HeaderString(got[2].d.Headers[amqpidem.HeaderDedup]) {
		t.Fatal("the conflict has the original's dedup header: the plugin would drop it")
	}
	dls := e.deadLetters(t)
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	dl, orig := dls[0], got[2].d
	want := map[string]string{
		idem.HeaderReason:            "conflict",
		amqpidem.HeaderReason:        "conflict",
		idem.HeaderDeadLetterKey:     e.queue + "/order-7",
		idem.HeaderFingerprint:       fp(t, byOrder, idem.Message{Payload: b}),
		idem.HeaderStoredFingerprint: fp(t, byOrder, idem.Message{Payload: a}),
		idem.HeaderStoredState:       "completed",
		idem.HeaderStoredAttempts:    "1",
		amqpidem.HeaderQueue:         e.queue,
		amqpidem.HeaderAttempt:       "1",
		amqpidem.HeaderDedup:         amqpidem.HeaderString(orig.Headers[amqpidem.HeaderDedup]),
		"tenant":                     "acme",
		"x-copy":                     "2",
	}
	for k, v := range want {
		if got := amqpidem.HeaderString(dl.Headers[k]); got != v {
			t.Errorf("dead letter %s = %q, want %q", k, got, v)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, amqpidem.HeaderString(dl.Headers[idem.HeaderStoredCreatedAt])); err != nil {
		t.Errorf("%s: %v", idem.HeaderStoredCreatedAt, err)
	}
	if dl.MessageId != "order-7" || !dl.Timestamp.Equal(orig.Timestamp) {
		t.Errorf("dead letter message-id %q, timestamp %v; want the original's (order-7, %v)", dl.MessageId, dl.Timestamp, orig.Timestamp)
	}
}
