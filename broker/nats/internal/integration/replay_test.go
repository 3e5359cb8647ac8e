package integration_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/internal/consumetest"
	"github.com/idemgo/idem/store/memory"
)

// fetchDeadLetters reads n dead letters from the dead-letter stream with
// an ordered consumer, as an operator's tool would.
func (e *env) fetchDeadLetters(t *testing.T, n int) []jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	oc, err := e.js.OrderedConsumer(ctx, e.stream+"_DLQ", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := oc.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	for m := range batch.Messages() {
		out = append(out, m)
	}
	if len(out) != n {
		t.Fatalf("%d dead letters fetched, want %d (%v)", len(out), n, batch.Error())
	}
	return out
}

// TestReplay: two messages are dead-lettered as max_deliver after their
// handler failed on both allowed deliveries (their records released, never
// completed). A producer re-send of one of them is processed afterwards.
// Replayed, each dead letter arrives on its original subject with the
// original's data and headers (Idem-Id, its own header), a Nats-Msg-Id of
// its own made from the original's, and none of idem's dead-letter
// headers; the consumer's record decides: the one processed meanwhile is
// acked as a duplicate, the one never completed is processed.
func TestReplay(t *testing.T) {
	e := newEnv(t)
	cons := e.limitedConsumer(t, "replay")
	g, err := natsidem.NewGuard(memory.New(), cons, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var broken atomic.Bool
	broken.Store(true)
	type seen struct {
		outcome idem.Outcome
		headers nats.Header
	}
	var (
		mu      sync.Mutex
		applied = map[string]int{}
	)
	settled := make(chan seen, 10)
	dead := make(chan struct{}, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() {
		runDone <- natsidem.Consume(ctx, cons, g, natsidem.Handle(func(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
			if broken.Load() {
				return nil, errors.New("downstream down")
			}
			mu.Lock()
			defer mu.Unlock()
			applied[natsidem.MessageOf(msg).ID]++
			return nil, nil
		}), natsidem.Options{Backoff: func(int) time.Duration { return time.Millisecond }, Hooks: broker.Hooks[jetstream.Msg]{
			OnDeadLetter: func(context.Context, jetstream.Msg, broker.Report) { dead <- struct{}{} },
			AfterSettle: func(_ context.Context, msg jetstream.Msg, r broker.Report) {
				if r.Action == idem.ActionAck {
					settled <- seen{r.Result.Outcome, msg.Headers()}
				}
			},
		}, JetStream: e.js, DeadLetterSubject: e.dlq, DoubleAck: true})
	}()

	subject := e.subject + ".orders"
	a, b := []byte(`{"n":1}`), []byte(`{"n":2}`)
	if _, err := natsidem.Publish(ctx, e.js, subject, "a", a, natsidem.WithHeader("Trace", "t1")); err != nil {
		t.Fatal(err)
	}
	if _, err := natsidem.Publish(ctx, e.js, subject, "b", b); err != nil {
		t.Fatal(err)
	}
	<-dead
	<-dead
	dls := e.fetchDeadLetters(t, 2)
	for _, dl := range dls {
		if r := dl.Headers().Get(idem.HeaderReason); r != broker.ReasonMaxDeliver {
			t.Fatalf("dead letter reason %q, want max_deliver", r)
		}
	}

	broken.Store(false)
	// Past the stream's duplicate window (a property of the server's
	// clock): the re-send and the replays are stored, as they are when an
	// operator replays minutes later.
	time.Sleep(3 * dupWindow)
	if _, err := natsidem.Publish(ctx, e.js, subject, "b", b); err != nil { // b re-sent and processed
		t.Fatal(err)
	}
	if s := <-settled; s.outcome != idem.OutcomeProcessed {
		t.Fatalf("the re-send of b: %v, want processed", s.outcome)
	}
	for _, dl := range dls { // inside the window that remembers the re-send of b
		if err := natsidem.Replay(ctx, e.js, dl); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]seen{}
	for range 2 {
		s := <-settled
		got[s.headers.Get(natsidem.HeaderID)] = s
	}
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	if got["a"].outcome != idem.OutcomeProcessed || got["b"].outcome != idem.OutcomeDuplicate {
		t.Errorf("replayed a %v, b %v; want processed, duplicate", got["a"].outcome, got["b"].outcome)
	}
	mu.Lock()
	if applied["a"] != 1 || applied["b"] != 1 {
		t.Errorf("applied %v, want a and b once each", applied)
	}
	mu.Unlock()
	for id, data := range map[string][]byte{"a": a, "b": b} {
		h := got[id].headers
		if orig, got := idem.DedupID(id, fp(t, data)), h.Get(jetstream.MsgIDHeader); !strings.HasPrefix(got, orig+"~replay-") {
			t.Errorf("replayed %s: Nats-Msg-Id %q, want one of its own made from the original's %q", id, got, orig)
		}
		for k := range h {
			if strings.HasPrefix(k, "Idem-") && k != natsidem.HeaderID {
				t.Errorf("replayed %s carries %s: %v", id, k, h)
			}
		}
	}
	if h := got["a"].headers; h.Get("Trace") != "t1" || len(h) != 3 {
		t.Errorf("replayed a has headers %v, want Nats-Msg-Id, Idem-Id and Trace", h)
	}
}

// TestReplayInsideDuplicateWindow: inside a two-minute duplicate window
// that remembers the originals' Nats-Msg-Ids, replays reach the consumer
// under the originals' keys: one sent by Publish (keyed by its Idem-Id),
// one a producer sent with a plain Nats-Msg-Id and no Idem-Id (keyed by
// Nats-Msg-Id, as MessageOf reads it by default), and the replay of a
// replay's dead letter, whose Nats-Msg-Id does not grow. A message that is
// not a dead letter is refused.
func TestReplayInsideDuplicateWindow(t *testing.T) {
	e := newEnv(t)
	e.longWindow(t)
	cons := e.consumer(t, "window", 30*time.Second)
	g, err := natsidem.NewGuard(memory.New(), cons, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	fails := map[string]int{"w-1": 2, "w-2": 1} // permanent failures left to make, by key
	reports := make(chan broker.Report, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() {
		runDone <- natsidem.Consume(ctx, cons, g, natsidem.Handle(func(_ context.Context, msg jetstream.Msg) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			if id := natsidem.MessageOf(msg).ID; fails[id] > 0 {
				fails[id]--
				return nil, idem.Permanent(errors.New("rejected"))
			}
			return nil, nil
		}), natsidem.Options{Hooks: consumetest.ReportTo[jetstream.Msg](reports), JetStream: e.js, DeadLetterSubject: e.dlq})
	}()
	report := func(want idem.Action) broker.Report {
		t.Helper()
		r := <-reports
		if r.Action != want || r.BrokerErr != nil {
			t.Fatalf("report %+v, want %v", r, want)
		}
		return r
	}
	if _, err := natsidem.Publish(ctx, e.js, e.subject+".x", "w-1", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	report(idem.ActionDeadLetter)
	plain := nats.NewMsg(e.subject + ".x")
	plain.Header.Set(jetstream.MsgIDHeader, "w-2")
	plain.Data = []byte(`{"n":2}`)
	if _, err := e.js.PublishMsg(ctx, plain); err != nil {
		t.Fatal(err)
	}
	report(idem.ActionDeadLetter)

	dls := e.fetchDeadLetters(t, 2)
	for i, dl := range dls {
		if m, err := natsidem.DeadLetterOf(dl); err != nil || m.ID != []string{"w-1", "w-2"}[i] {
			t.Fatalf("DeadLetterOf(dead letter %d) = %+v, %v", i, m, err)
		}
		if err := natsidem.Replay(ctx, e.js, dl); err != nil {
			t.Fatalf("Replay inside the window: %v", err)
		}
	}
	// w-1's replay fails once more, w-2's is processed under its original
	// Nats-Msg-Id.
	got := map[idem.Action]string{}
	for range 2 {
		r := <-reports
		got[r.Action] = r.Result.Key.ID
	}
	if got[idem.ActionDeadLetter] != "w-1" || got[idem.ActionAck] != "w-2" {
		t.Fatalf("replays settled %v, want w-1 dead-lettered again and w-2 acked", got)
	}
	again := e.fetchDeadLetters(t, 3)[2]
	if m, err := natsidem.DeadLetterOf(again); err != nil || m.ID != "w-1" {
		t.Fatalf("DeadLetterOf(the dead letter of w-1's replay) = %+v, %v; want w-1", m, err)
	}
	if err := natsidem.Replay(ctx, e.js, again); err != nil {
		t.Fatalf("Replay of a replay's dead letter: %v", err)
	}
	if r := report(idem.ActionAck); r.Result.Key.ID != "w-1" || r.Result.Outcome != idem.OutcomeProcessed {
		t.Fatalf("the second replay of w-1: %+v, want w-1 processed", r)
	}
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	last := e.deadLetters(t)[2]
	orig := idem.DedupID("w-1", fp(t, []byte("{}")))
	if id := hdr(last, natsidem.HeaderOriginalPrefix+jetstream.MsgIDHeader); !strings.HasPrefix(id, orig+"~replay-") || strings.Count(id, "~replay-") != 1 {
		t.Errorf("the replay's Nats-Msg-Id was %q, want %q, the mark and a nonce", id, orig)
	}
	if err := natsidem.Replay(context.Background(), e.js, fakeMsg{h: nats.Header{"Nats-Msg-Id": {"x"}}}); !errors.Is(err, natsidem.ErrNotDeadLetter) {
		t.Fatalf("Replay of a plain message: %v, want ErrNotDeadLetter", err)
	}
}
