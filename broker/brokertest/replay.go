package brokertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// Replayer is a Broker whose dead letters can be replayed with the
// adapter's Replay (every adapter has one). Brokers that do not implement
// it skip the Replay case, saying so.
type Replayer interface {
	// Replay re-publishes, with the adapter's Replay, every dead letter
	// DeadLetters has returned and Replay has not yet replayed, and returns
	// how many it replayed.
	Replay(ctx context.Context) (int, error)
}

// seen records each delivery the consumer settled, by message id.
type seen struct {
	mu  sync.Mutex
	out map[string][]idem.Outcome
}

func (s *seen) hook(_ context.Context, m idem.Message, r broker.Report) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out[m.ID] = append(s.out[m.ID], r.Result.Outcome)
}

func (s *seen) count(id string, o idem.Outcome) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, x := range s.out[id] {
		if x == o {
			n++
		}
	}
	return n
}

func (s *seen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("settled %v", s.out)
}

// testReplay: dead letters replayed with the adapter's Replay reach the
// consumer again under their original id, and the record decides as for
// any redelivery: one never processed is applied (once); one whose key was
// completed meanwhile (a producer re-send processed after the dead letter)
// is a duplicate, acked without running the handler; content that
// conflicts with the recorded key is dead-lettered again, as a conflict.
func testReplay(t *testing.T, b Broker) {
	rp, ok := b.(Replayer)
	if !ok {
		t.Skip("the adapter's suite broker does not implement brokertest.Replayer")
	}
	g := newGuard(t, nil, idem.Options{})
	eff := newEffects()
	s := &seen{out: map[string][]idem.Outcome{}}
	var mu sync.Mutex
	broken := map[string]bool{"refund-1": true, "refund-2": true}
	c := Consumer{
		Guard: g,
		Handle: func(ctx context.Context, m idem.Message) ([]byte, error) {
			mu.Lock()
			fail := broken[m.ID]
			mu.Unlock()
			if fail {
				return nil, idem.Permanent(errors.New("account frozen"))
			}
			eff.apply(m)
			return nil, nil
		},
		Hooks: broker.Hooks[idem.Message]{AfterSettle: s.hook},
	}
	start(t, b, c)
	// refund-1 and refund-2 fail permanently; order-7 is processed and
	// then reused with other content (a conflict).
	publish(t, b,
		Message{ID: "refund-1", Payload: []byte(`{"refund":1}`)},
		Message{ID: "refund-2", Payload: []byte(`{"refund":2}`)},
		Message{ID: "order-7", Payload: []byte(`{"amount":7}`)},
	)
	waitFor(t, "order-7 applied", func() bool { return eff.count("order-7") == 1 }, s.String)
	publish(t, b, Message{ID: "order-7", Payload: []byte(`{"amount":700}`)})
	dls := waitDeadLetters(t, b, 3)
	reasons := map[string]string{}
	for _, d := range dls {
		reasons[d.ID] = d.Reason()
	}
	if reasons["refund-1"] != "permanent" || reasons["refund-2"] != "permanent" || reasons["order-7"] != "conflict" {
		t.Fatalf("dead letters by id: %v, want refund-1 and refund-2 permanent, order-7 conflict", reasons)
	}

	// The operator fixes the account; the producer re-sends refund-2,
	// which is processed before anyone replays its dead letter.
	mu.Lock()
	clear(broken)
	mu.Unlock()
	publish(t, b, Message{ID: "refund-2", Payload: []byte(`{"refund":2}`)})
	waitFor(t, "the re-sent refund-2 applied", func() bool { return eff.count("refund-2") == 1 }, s.String)

	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	n, err := rp.Replay(ctx)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if n != 3 {
		t.Fatalf("replayed %d dead letters, want 3", n)
	}
	waitFor(t, "the replayed refund-1 applied", func() bool { return eff.count("refund-1") == 1 }, s.String)
	waitFor(t, "the replayed refund-2 acked as a duplicate", func() bool {
		return s.count("refund-2", idem.OutcomeDuplicate) == 1
	}, s.String)
	var conflicts []DeadLetter
	waitFor(t, "the replayed conflict dead-lettered again", func() bool {
		conflicts = conflicts[:0]
		for _, d := range deadLetters(t, b) {
			if d.ID == "order-7" {
				conflicts = append(conflicts, d)
			}
		}
		return len(conflicts) >= 2
	}, s.String)
	for _, d := range conflicts {
		if d.Reason() != "conflict" || string(d.Payload) != `{"amount":700}` {
			t.Errorf("order-7 dead letter reason %q payload %s, want conflict with the reuse's payload", d.Reason(), d.Payload)
		}
	}
	for id, want := range map[string]int{"refund-1": 1, "refund-2": 1, "order-7": 1} {
		if got := eff.count(id); got != want {
			t.Errorf("%s applied %d times, want %d (%s)", id, got, want, s)
		}
	}
	eff.mu.Lock()
	p := string(eff.payloads["order-7"])
	eff.mu.Unlock()
	if p != `{"amount":7}` {
		t.Errorf("order-7 applied with %s, want the original", p)
	}
}

// Deduplicator is a Broker that drops, inside a duplicate window, a
// message whose broker duplicate id it has stored before: JetStream's
// Nats-Msg-Id, Service Bus's MessageId on an entity with duplicate
// detection, an SQS FIFO queue's MessageDeduplicationId. Brokers without
// such deduplication do not implement it, and ReplayInsideDuplicateWindow
// skips, saying so.
type Deduplicator interface {
	// PublishDeduplicated sends msgs as the adapter's producer helper does
	// (natsidem.Publish, servicebus.Send, sqsidem.Send): each with the
	// broker's duplicate id for its id and content (idem.DedupID), to the
	// destination Start consumes, whose duplicate window is on and longer
	// than the case (JetStream's default two minutes, say). The case calls
	// it before it starts any consumer, so that an adapter whose broker
	// fixes deduplication when the destination is created (Service Bus's
	// RequiresDuplicateDetection) may create it then.
	PublishDeduplicated(ctx context.Context, msgs ...Message) error
}

// testReplayInsideDuplicateWindow: a message published with the broker's
// duplicate id, dead-lettered and replayed at once with the adapter's
// Replay, well inside the broker's duplicate window that remembers the
// original's id, reaches the consumer under its original id and is
// processed once. A replay that kept the original's duplicate id would be
// dropped by the broker (JetStream acknowledges it as a duplicate, Service
// Bus and SQS drop it silently), and could only succeed once the window had
// passed: a day, on a stream with a 24-hour window.
func testReplayInsideDuplicateWindow(t *testing.T, b Broker) {
	rp, ok := b.(Replayer)
	if !ok {
		t.Skip("the adapter's suite broker does not implement brokertest.Replayer")
	}
	dd, ok := b.(Deduplicator)
	if !ok {
		t.Skip("no broker-side deduplication: the adapter's suite broker does not implement brokertest.Deduplicator")
	}
	g := newGuard(t, nil, idem.Options{})
	eff := newEffects()
	s := &seen{out: map[string][]idem.Outcome{}}
	var broken atomic.Bool
	broken.Store(true)
	c := Consumer{
		Guard: g,
		Handle: func(ctx context.Context, m idem.Message) ([]byte, error) {
			if m.ID == "payment-1" && broken.Load() {
				return nil, idem.Permanent(errors.New("account frozen"))
			}
			eff.apply(m)
			return nil, nil
		},
		Hooks: broker.Hooks[idem.Message]{AfterSettle: s.hook},
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	payment := Message{ID: "payment-1", Payload: []byte(`{"payment":1,"amount":25}`)}
	if err := dd.PublishDeduplicated(ctx, payment); err != nil {
		t.Fatalf("PublishDeduplicated: %v", err)
	}
	start(t, b, c)
	dls := waitDeadLetters(t, b, 1)
	if dls[0].ID != payment.ID || dls[0].Reason() != "permanent" {
		t.Fatalf("dead letter %s reason %q, want %s permanent", dls[0].ID, dls[0].Reason(), payment.ID)
	}

	// The operator fixes the account and replays at once: the broker still
	// remembers the original's duplicate id.
	broken.Store(false)
	n, err := rp.Replay(ctx)
	if err != nil {
		t.Fatalf("Replay inside the duplicate window: %v", err)
	}
	if n != 1 {
		t.Fatalf("replayed %d dead letters, want 1", n)
	}
	waitFor(t, "the replay processed under the original id", func() bool {
		return s.count(payment.ID, idem.OutcomeProcessed) == 1
	}, s.String)
	if got := eff.count(payment.ID); got != 1 {
		t.Errorf("%s applied %d times, want once (%s)", payment.ID, got, s)
	}
	eff.mu.Lock()
	p := string(eff.payloads[payment.ID])
	eff.mu.Unlock()
	if p != string(payment.Payload) {
		t.Errorf("%s applied with %s, want the original's payload", payment.ID, p)
	}
	if n := eff.distinct(); n != 1 {
		t.Errorf("the handler applied %d ids, want only %s: a replay keyed by its own duplicate id? (%s)", n, payment.ID, s)
	}
}
