package integration_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/internal/consumetest"
	"github.com/idemgo/idem/store/memory"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// fp is the default fingerprint of data.
func fp(t *testing.T, data []byte) string {
	t.Helper()
	f, err := idem.PayloadFingerprint(idem.Message{Payload: data})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// longWindow gives the input stream a duplicate window longer than the
// test, as production streams have (two minutes by default).
func (e *env) longWindow(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.js.UpdateStream(ctx, jetstream.StreamConfig{Name: e.stream, Subjects: []string{e.subject + ".>"},
		Storage: jetstream.MemoryStorage, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
}

// run consumes cons with guard g until the test ends, reporting on a
// channel.
func (e *env) run(t *testing.T, cons jetstream.Consumer, g *idem.Guard) <-chan broker.Report {
	t.Helper()
	reports := make(chan broker.Report, 10)
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() {
		runDone <- natsidem.Consume(ctx, cons, g, natsidem.Handle(func(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
			k, _ := idem.KeyFromContext(ctx)
			return []byte(k.ID), nil
		}), natsidem.Options{Hooks: consumetest.ReportTo[jetstream.Msg](reports), JetStream: e.js, DeadLetterSubject: e.dlq, DoubleAck: true})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Error(err)
		}
	})
	return reports
}

// TestPublishConflictReachesConsumer: Publish derives Nats-Msg-Id from the
// id and the content, so inside JetStream's duplicate window a retry of
// the same content is dropped by the server while the id reused with other
// content is stored, reaches the consumers and is dead-lettered as a
// conflict. The consumers' keys are the plain id, whether read by the
// default MessageOf / idem.MessageID or from the Nats-Msg-Id header.
func TestPublishConflictReachesConsumer(t *testing.T) {
	e := newEnv(t)
	e.longWindow(t)
	ctx := context.Background()
	a, b := []byte(`{"order":7,"amount":5}`), []byte(`{"order":7,"amount":500}`)
	for i, wantDup := range []bool{false, true} {
		ack, err := natsidem.Publish(ctx, e.js, e.subject+".x", "order-7", a)
		if err != nil {
			t.Fatal(err)
		}
		if ack.Duplicate != wantDup {
			t.Fatalf("publish %d of the same content: Duplicate = %v, want %v", i, ack.Duplicate, wantDup)
		}
	}
	keys := map[string]idem.KeyFunc{"billing": nil, "audit": idem.HeaderKey(jetstream.MsgIDHeader)}
	reports := map[string]<-chan broker.Report{}
	for name, key := range keys {
		cons := e.consumer(t, name, 30*time.Second)
		g, err := natsidem.NewGuard(memory.New(), cons, idem.Options{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		reports[name] = e.run(t, cons, g)
		if r := <-reports[name]; r.Action != idem.ActionAck || r.Result.Outcome != idem.OutcomeProcessed || r.Result.Key.ID != "order-7" {
			t.Fatalf("%s: first report %+v, want order-7 processed", name, r)
		}
	}
	ack, err := natsidem.Publish(ctx, e.js, e.subject+".x", "order-7", b)
	if err != nil {
		t.Fatal(err)
	}
	if ack.Duplicate {
		t.Fatal("the server dropped the id reused with other content as a duplicate: no consumer sees the conflict")
	}
	for name := range keys {
		if r := <-reports[name]; r.Action != idem.ActionDeadLetter || r.Reason != "conflict" || r.Result.Key.ID != "order-7" {
			t.Fatalf("%s: report %+v, want order-7's conflict dead-lettered", name, r)
		}
	}
	dls := e.deadLetters(t)
	if len(dls) != len(keys) {
		t.Fatalf("%d dead letters, want one per consumer", len(dls))
	}
	for _, dl := range dls {
		consumer := hdr(dl, natsidem.HeaderConsumer)
		want := map[string]string{
			idem.HeaderReason:                             "conflict",
			idem.HeaderDeadLetterKey:                      consumer + "/order-7",
			idem.HeaderFingerprint:                        fp(t, b),
			idem.HeaderStoredFingerprint:                  fp(t, a),
			idem.HeaderStoredState:                        "completed",
			natsidem.HeaderID:                             "order-7",
			natsidem.HeaderMsgID:                          idem.DedupID("order-7", fp(t, b)),
			natsidem.HeaderOriginalPrefix + "Nats-Msg-Id": idem.DedupID("order-7", fp(t, b)),
			natsidem.HeaderStream:                         e.stream,
			natsidem.HeaderStreamSeq:                      "2",
			natsidem.HeaderDeliveries:                     "1",
		}
		for k, v := range want {
			if got := hdr(dl, k); got != v {
				t.Errorf("dead letter from %s: %s = %q, want %q", consumer, k, got, v)
			}
		}
		// The key was first claimed before this message was stored: the
		// stored content is the original and this message reused its id.
		if created, stored := times(t, dl); !created.Before(stored) {
			t.Errorf("dead letter from %s: stored record created %v, message stored %v: want the record first", consumer, created, stored)
		}
	}
}

// times returns a dead letter's Idem-Stored-Created-At and
// Idem-Original-Timestamp.
func times(t *testing.T, dl *nats.Msg) (created, stored time.Time) {
	t.Helper()
	created, err := time.Parse(time.RFC3339Nano, hdr(dl, idem.HeaderStoredCreatedAt))
	if err != nil {
		t.Fatalf("%s: %v", idem.HeaderStoredCreatedAt, err)
	}
	stored, err = time.Parse(time.RFC3339Nano, hdr(dl, natsidem.HeaderTimestamp))
	if err != nil {
		t.Fatalf("%s: %v", natsidem.HeaderTimestamp, err)
	}
	return created, stored
}

// TestDeadLetterShowsLaterWinner: after a crash, a later content B can win
// an id before the original A is consumed; A is then the one dead-lettered.
// Its headers alone say so: the key's stored content (fingerprint of B,
// first claimed after A was stored) beside A's own fingerprint, stream
// sequence and storage time, and A's original id headers.
func TestDeadLetterShowsLaterWinner(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b := []byte(`{"order":9,"amount":5}`), []byte(`{"order":9,"amount":9}`)
	if _, err := natsidem.Publish(ctx, e.js, e.subject+".x", "order-9", a, natsidem.WithCloudEvent("/shop", "order")); err != nil {
		t.Fatal(err)
	}
	cons := e.consumer(t, "billing", 30*time.Second)
	g, err := natsidem.NewGuard(memory.New(), cons, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// B, published later, is committed first by another instance.
	if _, err := g.Do(ctx, idem.Message{ID: "order-9", Payload: b}, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if r := <-e.run(t, cons, g); r.Action != idem.ActionDeadLetter || r.Reason != "conflict" {
		t.Fatalf("report %+v, want the original dead-lettered as a conflict", r)
	}
	dls := e.deadLetters(t)
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	dl := dls[0]
	if hdr(dl, idem.HeaderFingerprint) != fp(t, a) || hdr(dl, idem.HeaderStoredFingerprint) != fp(t, b) ||
		hdr(dl, natsidem.HeaderStreamSeq) != "1" || hdr(dl, natsidem.HeaderID) != "order-9" || hdr(dl, "ce-id") != "order-9" ||
		hdr(dl, natsidem.HeaderOriginalPrefix+jetstream.MsgIDHeader) != idem.DedupID("order-9", fp(t, a)) {
		t.Fatalf("dead letter headers %v", dl.Header)
	}
	if n, err := strconv.Atoi(hdr(dl, idem.HeaderStoredAttempts)); err != nil || n != 1 {
		t.Errorf("%s = %q, want 1", idem.HeaderStoredAttempts, hdr(dl, idem.HeaderStoredAttempts))
	}
	if created, stored := times(t, dl); !stored.Before(created) {
		t.Errorf("message stored %v, key first claimed %v: want the message first (the original lost the key)", stored, created)
	}
}
