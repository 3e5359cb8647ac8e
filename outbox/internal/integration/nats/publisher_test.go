package outboxnats_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/internal/integration/outboxenv"
	outboxnats "github.com/idemgo/idem/outbox/nats"
	"github.com/idemgo/idem/outbox/outboxtest"
)

// TestRelay runs the relay's scenarios through JetStream over an
// in-memory outbox (outbox/internal/integration/matrix runs them on every database).
func TestRelay(t *testing.T) {
	outboxtest.RunRelay(t, outboxenv.Memory, outboxenv.NATS)
}

func rec(id, subject string, payload string) outbox.Record {
	return outbox.Record{Seq: 1, Message: outbox.Message{ID: id, Destination: subject, Payload: []byte(payload),
		Headers: map[string]string{"Content-Type": "application/json", "traceparent": "00-abc-def-01"}}}
}

func publish(t *testing.T, p *outboxnats.Publisher, recs ...outbox.Record) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.Publish(ctx, recs)
}

// The consumer side reads what the publisher wrote where it looks by
// default: the stable id in Idem-Id, Nats-Msg-Id the dedup id of the id and
// the payload's fingerprint, the headers as they were.
func TestWhereTheConsumerLooks(t *testing.T) {
	j := outboxenv.NewJetStream(t, time.Minute)
	p, err := outboxnats.New(j.JS, outboxnats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := rec("order-1-charged", j.Subject, `{"amount":42}`)
	if errs := publish(t, p, r); errs[0] != nil {
		t.Fatal(errs[0])
	}
	receive := j.Receive(t)
	m, err := receive(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fp, _ := idem.PayloadFingerprint(idem.Message{Payload: r.Payload})
	stream, err := j.JS.Stream(context.Background(), j.Stream)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := stream.GetLastMsgForSubject(context.Background(), j.Subject)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != r.ID || string(m.Payload) != string(r.Payload) || m.Header("traceparent") != "00-abc-def-01" || m.ContentType != "application/json" {
		t.Errorf("MessageOf: %+v", m)
	}
	if got := raw.Header.Get(jetstream.MsgIDHeader); got != idem.DedupID(r.ID, fp) {
		t.Errorf("Nats-Msg-Id %q, want idem.DedupID %q", got, idem.DedupID(r.ID, fp))
	}
	if got := raw.Header.Get(natsidem.HeaderID); got != r.ID {
		t.Errorf("Idem-Id %q", got)
	}
}

// Inside the duplicate window the stream drops a repeat of the same id and
// content (the relay publishing again after a crash), and never an id
// reused with other content.
func TestDuplicateWindowNeverHidesAConflict(t *testing.T) {
	j := outboxenv.NewJetStream(t, time.Minute)
	p, err := outboxnats.New(j.JS, outboxnats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []outbox.Record{
		rec("x", j.Subject, "first"), rec("x", j.Subject, "first"), rec("x", j.Subject, "other content"),
	} {
		if errs := publish(t, p, r); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	info, err := j.JS.Stream(context.Background(), j.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 2 {
		t.Fatalf("the stream holds %d messages, want 2: the repeat dropped, the conflict kept", n)
	}
}

func TestRejections(t *testing.T) {
	j := outboxenv.NewJetStream(t, time.Minute)
	p, err := outboxnats.New(j.JS, outboxnats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	errs := publish(t, p,
		rec("big", j.Subject, strings.Repeat("x", 2*outboxenv.MaxMsgSize)), // over the stream's MaxMsgSize
		rec("fine", j.Subject, "ok"),
		rec("bad-subject", "a..b", "x"),
	)
	if !errors.Is(errs[0], outbox.ErrRejected) {
		t.Errorf("over the stream's maximum: %v, want ErrRejected", errs[0])
	}
	if errs[1] != nil {
		t.Errorf("a good message beside them: %v", errs[1])
	}
	if errs[2] == nil {
		t.Errorf("a malformed subject was published")
	}
	// No stream for the subject is a configuration the operator fixes: retried.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if errs := p.Publish(ctx, []outbox.Record{rec("nowhere", "no.stream.here", "x")}); errs[0] == nil || errors.Is(errs[0], outbox.ErrRejected) {
		t.Errorf("no stream: %v, want a retryable error", errs[0])
	}
}
