package integration_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/store/memory"
)

// first returns the first value of the named header of r, and whether r has
// it.
func first(r *kgo.Record, name string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value), true
		}
	}
	return "", false
}

// checkHeaders asserts the first value of each named header of r.
func checkHeaders(t *testing.T, r *kgo.Record, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got, ok := first(r, k); !ok || got != v {
			t.Errorf("dead letter header %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
}

// checkOriginalHeaders asserts that the dead letter ends with the original
// record's headers exactly as they were: same names, values, order and
// repeats.
func checkOriginalHeaders(t *testing.T, dl, orig *kgo.Record) {
	t.Helper()
	n := len(orig.Headers)
	if len(dl.Headers) < n || !slices.EqualFunc(dl.Headers[len(dl.Headers)-n:], orig.Headers, func(a, b kgo.RecordHeader) bool {
		return a.Key == b.Key && string(a.Value) == string(b.Value)
	}) {
		t.Errorf("dead letter headers %v do not end with the original's %v", dl.Headers, orig.Headers)
	}
}

// TestDeadLetterCarriesRecord: after a later content won the key (here it
// was processed first, as commit order after a crash can arrange), the
// original is dead-lettered as a conflict, and its headers alone show it:
// the stored record's fingerprint, state, token, attempts and first-claim
// time beside the message's own fingerprint, the original topic, partition,
// offset and timestamp, and the original headers as they were (including a
// repeated header and idem headers from an earlier dead-lettering). A
// parked orphan carries its stored in-progress record the same way.
func TestDeadLetterCarriesRecord(t *testing.T) {
	e := newEnv(t, "dlheaders", 1)
	mem := memory.New()
	ctx := context.Background()

	// The later content B of o-1 holds the key, completed.
	winner, err := idem.New(mem, idem.Options{Scope: e.group})
	if err != nil {
		t.Fatal(err)
	}
	contentB := []byte(`{"amount":7}`)
	if _, err := winner.Do(ctx, idem.Message{ID: "o-1", Payload: contentB}, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	stored, err := mem.Get(ctx, idem.Key{Scope: e.group, ID: "o-1"})
	if err != nil {
		t.Fatal(err)
	}
	// The original content A of o-1, replayed from an earlier dead letter.
	orig := kafka.Record(e.topic, "cust-1", "o-1", []byte(`{"amount":5}`),
		kafka.WithHeader("trace", "t1"), kafka.WithHeader("trace", "t2"),
		kafka.WithHeader(idem.HeaderReason, "earlier"), kafka.WithHeader(kafka.HeaderOriginalOffset, "9"))
	parked := kafka.Record(e.topic, "", "o-2", []byte("o-2"))
	fpA, _ := idem.PayloadFingerprint(kafka.MessageOf(orig))
	fpParked, _ := idem.PayloadFingerprint(kafka.MessageOf(parked))

	// o-2's claim was orphaned: in progress, its lease running out.
	now := time.Now()
	orphan, err := mem.Claim(ctx, idem.ClaimRequest{Key: idem.Key{Scope: e.group, ID: "o-2"}, Fingerprint: fpParked,
		Now: now, LeaseUntil: now.Add(200 * time.Millisecond), ExpiresAt: now.Add(time.Hour)})
	if err != nil || orphan.Outcome != idem.ClaimAcquired {
		t.Fatal(orphan, err)
	}
	e.produce(orig, parked)

	g, err := idem.New(mem, idem.Options{Scope: e.group, Stale: idem.StalePark})
	if err != nil {
		t.Fatal(err)
	}
	startConsumer(t, e, g, kafka.Options{Backoff: idem.ExponentialBackoff(time.Millisecond, time.Millisecond), CommitInterval: 20 * time.Millisecond},
		kafka.Handle(func(context.Context, *kgo.Record) ([]byte, error) {
			t.Error("the handler ran: both records must be dead-lettered")
			return nil, nil
		}))
	e.waitCommitted(t)
	dls := e.dlqRecords(2)

	conflict := dls[0]
	checkHeaders(t, conflict, map[string]string{
		idem.HeaderReason:             "conflict",
		idem.HeaderDeadLetterKey:      e.group + "/o-1",
		idem.HeaderFingerprint:        fpA,
		idem.HeaderStoredFingerprint:  stored.Fingerprint,
		idem.HeaderStoredState:        string(idem.StateCompleted),
		idem.HeaderStoredToken:        strconv.FormatInt(stored.Token, 10),
		idem.HeaderStoredAttempts:     "1",
		idem.HeaderStoredCreatedAt:    stored.CreatedAt.UTC().Format(time.RFC3339Nano),
		kafka.HeaderOriginalTopic:     e.topic,
		kafka.HeaderOriginalPartition: "0",
		kafka.HeaderOriginalOffset:    strconv.FormatInt(orig.Offset, 10),
	})
	if stored.Fingerprint == fpA {
		t.Fatal("the winner's fingerprint equals the original's: the test shows nothing")
	}
	// Kafka keeps timestamps in milliseconds.
	if v, _ := first(conflict, kafka.HeaderOriginalTimestamp); v != time.UnixMilli(orig.Timestamp.UnixMilli()).UTC().Format(time.RFC3339Nano) {
		t.Errorf("original timestamp %q, produced at %s", v, orig.Timestamp.UTC().Format(time.RFC3339Nano))
	}
	if v, _ := first(conflict, idem.HeaderError); v == "" {
		t.Error("no error header")
	}
	checkOriginalHeaders(t, conflict, orig)
	if string(conflict.Key) != "cust-1" || string(conflict.Value) != `{"amount":5}` {
		t.Errorf("dead letter key %q value %q", conflict.Key, conflict.Value)
	}

	checkHeaders(t, dls[1], map[string]string{
		idem.HeaderReason:            "parked",
		idem.HeaderDeadLetterKey:     e.group + "/o-2",
		idem.HeaderFingerprint:       fpParked, // the engine's one header builder: every reason carries it
		idem.HeaderStoredFingerprint: orphan.Record.Fingerprint,
		idem.HeaderStoredState:       string(idem.StateInProgress),
		idem.HeaderStoredToken:       strconv.FormatInt(orphan.Record.Token, 10),
		kafka.HeaderOriginalOffset:   strconv.FormatInt(parked.Offset, 10),
	})
	checkOriginalHeaders(t, dls[1], parked)
}

// TestConflictReachesConsumer: Record's producer side lets no broker
// dedup drop a conflict. Kafka's idempotent producer (on, the kgo default)
// dedups a retried batch by producer id and sequence number, never by
// content, so an id reused with other content, sent in the same batch by the
// same producer as its original, reaches the consumer and is dead-lettered
// as a conflict; a re-send of the same content is a duplicate.
func TestConflictReachesConsumer(t *testing.T) {
	e := newEnv(t, "reused", 1)
	if off, _ := e.cl.OptValue(kgo.DisableIdempotentWrite).(bool); off {
		t.Fatal("the test producer must be idempotent")
	}
	recs := []*kgo.Record{
		kafka.Record(e.topic, "", "o-1", []byte("A")),
		kafka.Record(e.topic, "", "o-1", []byte("A")),
		kafka.Record(e.topic, "", "o-1", []byte("B")),
	}
	e.produce(recs...)
	counter := &idem.Counter{}
	g, _ := newGuard(t, e, counter)
	startConsumer(t, e, g, kafka.Options{CommitInterval: 20 * time.Millisecond}, kafka.Handle(func(context.Context, *kgo.Record) ([]byte, error) { return nil, nil }))
	e.waitCommitted(t)
	if counter.Count(idem.OutcomeProcessed) != 1 || counter.Count(idem.OutcomeDuplicate) != 1 || counter.Count(idem.OutcomeConflict) != 1 {
		t.Errorf("outcomes %v, want one each of processed, duplicate and conflict", counter.Counts())
	}
	dl := e.dlqRecords(1)[0]
	checkHeaders(t, dl, map[string]string{idem.HeaderReason: "conflict", kafka.HeaderOriginalOffset: "2"})
	if string(dl.Value) != "B" {
		t.Errorf("dead letter %q, want the reused id's other content", dl.Value)
	}
}
