package integration_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/kafka"
)

// TestReplay: two records are dead-lettered after their handler failed
// MaxAttempts times (their records released, never completed). A producer
// re-send of one of them is processed afterwards. Replayed, each dead
// letter arrives at its original topic with the original's key, value and
// headers exactly as they were and none of idem's dead-letter headers; the
// consumer's record decides: the one processed meanwhile is acked as a
// duplicate, the one never completed is processed.
func TestReplay(t *testing.T) {
	e := newEnv(t, "replay", 1)
	counter := &idem.Counter{}
	g, _ := newGuard(t, e, counter)
	var broken atomic.Bool
	broken.Store(true)
	var (
		mu       sync.Mutex
		applied  = map[string]int{}
		outcomes = map[int64]idem.Outcome{} // by offset
		seen     = map[int64][]kgo.RecordHeader{}
	)
	h := kafka.Handle(func(ctx context.Context, rec *kgo.Record) ([]byte, error) {
		if broken.Load() {
			return nil, errors.New("downstream down")
		}
		mu.Lock()
		defer mu.Unlock()
		applied[idOf(rec)]++
		return nil, nil
	})
	opts := kafka.Options{MaxDeliveries: 2, Backoff: idem.ExponentialBackoff(time.Millisecond, time.Millisecond), Hooks: broker.Hooks[*kgo.Record]{BeforeSettle: func(_ context.Context, rec *kgo.Record, r broker.Report) {
		mu.Lock()
		defer mu.Unlock()
		outcomes[rec.Offset] = r.Result.Outcome
		seen[rec.Offset] = rec.Headers
	}}, CommitInterval: 20 * time.Millisecond}
	startConsumer(t, e, g, opts, h)

	a := kafka.Record(e.topic, "cust-1", "a", []byte(`{"n":1}`),
		kafka.WithHeader("trace", "t1"), kafka.WithHeader("trace", "t2"), kafka.WithHeader(idem.HeaderReason, "earlier"))
	b := kafka.Record(e.topic, "", "b", []byte(`{"n":2}`))
	e.produce(a, b)
	eventually(t, "both dead-lettered", func() bool { return e.dlqEnd() == 2 })
	dls := e.dlqRecords(2)
	for _, dl := range dls {
		checkHeaders(t, dl, map[string]string{idem.HeaderReason: broker.ReasonMaxDeliver})
	}

	broken.Store(false)
	e.produce(kafka.Record(e.topic, "", "b", []byte(`{"n":2}`))) // b re-sent and processed: offset 2
	eventually(t, "the re-send of b processed", func() bool { mu.Lock(); defer mu.Unlock(); return applied["b"] == 1 })

	ctx := context.Background()
	for _, dl := range dls {
		if err := kafka.Replay(ctx, e.cl, dl); err != nil {
			t.Fatal(err)
		}
	}
	e.waitCommitted(t)

	mu.Lock()
	defer mu.Unlock()
	if applied["a"] != 1 || applied["b"] != 1 {
		t.Errorf("applied %v, want a and b once each", applied)
	}
	if outcomes[3] != idem.OutcomeProcessed || outcomes[4] != idem.OutcomeDuplicate {
		t.Errorf("replayed a (offset 3) %s, b (offset 4) %s; want processed, duplicate", outcomes[3], outcomes[4])
	}
	for off, orig := range map[int64]*kgo.Record{3: a, 4: b} {
		if !slices.EqualFunc(seen[off], orig.Headers, func(x, y kgo.RecordHeader) bool { return x.Key == y.Key && string(x.Value) == string(y.Value) }) {
			t.Errorf("replayed offset %d has headers %v, want the original's %v", off, seen[off], orig.Headers)
		}
		for _, h := range seen[off] {
			if strings.HasPrefix(h.Key, "Idem-Original-") {
				t.Errorf("replayed offset %d carries %s", off, h.Key)
			}
		}
	}
	if n := counter.Count(idem.OutcomeConflict); n != 0 {
		t.Errorf("%d conflicts", n)
	}
}

// TestReplayRecord: Replay sends back exactly the record DeadLetter was
// given (key, value, headers with repeats and earlier idem headers), and
// refuses a record that is not a dead letter.
func TestReplayRecord(t *testing.T) {
	e := newEnv(t, "replayrec", 1)
	orig := &kgo.Record{Topic: e.topic, Partition: 0, Offset: 77, Key: []byte("k"), Value: []byte("v"), Timestamp: time.Now(),
		Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: idem.HeaderReason, Value: []byte("old")},
			{Key: kafka.HeaderOriginalOffset, Value: []byte("9")}, {Key: "a", Value: []byte("2")}}}
	res := idem.Result{Outcome: idem.OutcomePermanent, Key: idem.Key{Scope: "s", ID: "id-1"}}
	dl := kafka.DeadLetter(e.dlq, orig, broker.DeadLetterHeaders(context.Background(), nil, kafka.MessageOf(orig), res, idem.Permanent(errors.New("no")), "permanent"))
	if err := kafka.Replay(context.Background(), e.cl, dl); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.c.ListenAddrs()...), kgo.ConsumeTopics(e.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) == 0 && ctx.Err() == nil {
		got = append(got, cl.PollFetches(ctx).Records()...)
	}
	if len(got) != 1 {
		t.Fatalf("%d records replayed", len(got))
	}
	r := got[0]
	if string(r.Key) != "k" || string(r.Value) != "v" || !slices.EqualFunc(r.Headers, orig.Headers, func(x, y kgo.RecordHeader) bool {
		return x.Key == y.Key && string(x.Value) == string(y.Value)
	}) {
		t.Errorf("replayed %q=%q %v, want the original %v", r.Key, r.Value, r.Headers, orig.Headers)
	}
	if err := kafka.Replay(context.Background(), e.cl, orig); !errors.Is(err, kafka.ErrNotDeadLetter) {
		t.Errorf("Replay of a plain record: %v, want ErrNotDeadLetter", err)
	}
}
