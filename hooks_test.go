package idem_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
)

// hookRecorder records starts, steps and events.
type hookRecorder struct {
	mu     sync.Mutex
	starts []idem.Start
	steps  []idem.Step
	events []idem.Event
	ctxOK  bool
}

type startMark struct{}

func (h *hookRecorder) ObserveStart(ctx context.Context, s idem.Start) context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.starts = append(h.starts, s)
	return context.WithValue(ctx, startMark{}, s.Key.ID)
}

func (h *hookRecorder) ObserveStep(_ context.Context, s idem.Step) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.steps = append(h.steps, s)
}

func (h *hookRecorder) Observe(ctx context.Context, e idem.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
	h.ctxOK = ctx.Value(startMark{}) == e.Key.ID
}

// failingRelease refuses every release and renewal.
type failingRelease struct{ idem.Store }

func (failingRelease) Release(context.Context, idem.ReleaseRequest) error {
	return errors.New("connection refused")
}
func (failingRelease) Renew(context.Context, idem.RenewRequest) error {
	return errors.New("connection refused")
}

func TestObserverHooks(t *testing.T) {
	for _, fan := range []bool{false, true} {
		rec := &hookRecorder{}
		var obs idem.Observer = rec
		if fan {
			obs = idem.Observers(rec, idem.NewSlogObserver(nil))
		}
		g := guard(t, failingRelease{memory.New()}, idem.Options{Observer: obs, Lease: 300 * time.Millisecond})
		msg := idem.Message{ID: "m1", Payload: []byte("x"), CorrelationID: "order-flow-9"}
		var handlerSaw any
		_, err := g.Do(context.Background(), msg, func(ctx context.Context) ([]byte, error) {
			handlerSaw = ctx.Value(startMark{})
			for {
				rec.mu.Lock()
				n := len(rec.steps)
				rec.mu.Unlock()
				if n > 0 || ctx.Err() != nil { // a renewal failed and was reported
					break
				}
				time.Sleep(time.Millisecond)
			}
			return nil, errors.New("transient")
		})
		if err == nil {
			t.Fatal("handler error lost")
		}
		rec.mu.Lock()
		if len(rec.starts) != 1 || rec.starts[0].CorrelationID != "order-flow-9" || rec.starts[0].Key.ID != "m1" {
			t.Fatalf("fan %v: starts %+v", fan, rec.starts)
		}
		if handlerSaw != "m1" || !rec.ctxOK {
			t.Fatalf("fan %v: the start's context did not reach the handler (%v) or Observe (%v)", fan, handlerSaw, rec.ctxOK)
		}
		ops := map[string]bool{}
		for _, s := range rec.steps {
			ops[s.Op] = true
			if s.Err == nil || s.CorrelationID != "order-flow-9" {
				t.Fatalf("step %+v", s)
			}
		}
		if !ops["renew"] || !ops["release"] {
			t.Fatalf("fan %v: steps %v, want the failed renew and release", fan, ops)
		}
		if len(rec.events) != 1 || rec.events[0].CorrelationID != "order-flow-9" || rec.events[0].Outcome != idem.OutcomeFailed {
			t.Fatalf("fan %v: events %+v", fan, rec.events)
		}
		rec.mu.Unlock()
	}
}

func TestCorrelation(t *testing.T) {
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	cases := []struct {
		fn   idem.CorrelationFunc
		m    idem.Message
		want string
	}{
		{idem.DefaultCorrelation, idem.Message{CorrelationID: "c1", Headers: map[string]string{"traceparent": tp}}, "c1"},
		{idem.DefaultCorrelation, idem.Message{Headers: map[string]string{"Traceparent": tp}}, "4bf92f3577b34da6a3ce929d0e0e4736"},
		{idem.DefaultCorrelation, idem.Message{Headers: map[string]string{"traceparent": "garbage"}}, ""},
		{idem.DefaultCorrelation, idem.Message{Headers: map[string]string{"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}}, ""},
		{idem.HeaderCorrelation("x-request-id"), idem.Message{Headers: map[string]string{"X-Request-Id": "r-7"}}, "r-7"},
		{idem.HeaderCorrelation("x-request-id"), idem.Message{CorrelationID: "c2"}, "c2"},
	}
	for i, c := range cases {
		if got := c.fn(c.m); got != c.want {
			t.Errorf("case %d: %q, want %q", i, got, c.want)
		}
	}
	// DoKey callers put their own in the context.
	rec := &hookRecorder{}
	g := guard(t, memory.New(), idem.Options{Observer: rec})
	ctx := idem.ContextWithCorrelation(context.Background(), "req-1")
	if _, err := g.DoKey(ctx, idem.Key{Scope: "test", ID: "k"}, "", func(ctx context.Context) ([]byte, error) {
		if idem.CorrelationFromContext(ctx) != "req-1" {
			t.Error("handler context lost the correlation id")
		}
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if rec.events[0].CorrelationID != "req-1" {
		t.Fatalf("event correlation %q", rec.events[0].CorrelationID)
	}
}

// The slog observer logs every fact of the vocabulary, each at its level.
func TestSlogObserverLogsEveryFact(t *testing.T) {
	var buf bytes.Buffer
	obs := idem.NewSlogObserver(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ctx := context.Background()
	key := idem.Key{Scope: "billing", ID: "k1"}
	obs.ObserveSettlement(ctx, idem.Settlement{Result: idem.Result{Key: key, Outcome: idem.OutcomeConflict}, Err: idem.ErrConflict,
		Action: idem.ActionDeadLetter, Reason: "conflict", DeadLettered: true})
	obs.ObserveError(ctx, idem.HandledError{Component: "broker", Scope: "billing", Err: errors.New("fetch: timeout")})
	obs.ObserveOutage(ctx, idem.Outage{Scope: "billing", Held: 3, Err: errors.New("connection refused")})
	obs.ObserveSweep(ctx, idem.Sweep{Deleted: 7})
	obs.ObserveRelay(ctx, idem.RelayEvent{Kind: idem.RelayParked, Owner: "r1", Err: errors.New("too large"),
		Record: &idem.RelayRecord{Seq: 4, ID: "m4", Destination: "orders", OrderingKey: "A"}})
	for _, want := range []string{
		`level=ERROR msg="idem settle dead_letter" scope=billing key=k1 action=dead_letter outcome=conflict`,
		`level=WARN msg="idem broker error" component=broker error="fetch: timeout" scope=billing`,
		`level=WARN msg="idem store outage" scope=billing held=3`,
		`level=DEBUG msg="idem sweep" deleted=7`,
		`level=ERROR msg="outbox parked" owner=r1 seq=4 id=m4 destination=orders attempts=0 ordering_key=A error="too large"`,
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("no %q in the log:\n%s", want, buf.String())
		}
	}
}

// Every event carries the claim's token and attempts and the handler's
// time, on Guard.Do and on a batch's Ticket.Do alike.
func TestObserverEventCarriesTheClaim(t *testing.T) {
	ctx := context.Background()
	var events []idem.Event
	g := guard(t, memory.New(), idem.Options{Observer: idem.ObserverFunc(func(_ context.Context, e idem.Event) {
		events = append(events, e)
	})})
	slow := func(context.Context) ([]byte, error) { time.Sleep(2 * time.Millisecond); return nil, nil }
	first, err := g.Do(ctx, idem.Message{ID: "a", Payload: []byte("x")}, slow)
	if err != nil {
		t.Fatal(err)
	}
	tickets, err := g.ClaimBatch(ctx, []idem.Message{{ID: "b", Payload: []byte("x")}, {ID: "a", Payload: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	var second idem.Result
	for i, tk := range tickets {
		res, err := tk.Do(ctx, slow)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			second = res
		}
	}
	want := []struct {
		outcome idem.Outcome
		token   int64
		handled bool
	}{{idem.OutcomeProcessed, first.Record.Token, true}, {idem.OutcomeProcessed, second.Record.Token, true}, {idem.OutcomeDuplicate, first.Record.Token, false}}
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d", len(events), len(want))
	}
	for i, w := range want {
		e := events[i]
		if e.Outcome != w.outcome || e.Token != w.token || w.token == 0 || e.Attempts != 1 {
			t.Errorf("event %d: %v token %d attempts %d; want %v token %d attempts 1", i, e.Outcome, e.Token, e.Attempts, w.outcome, w.token)
		}
		if w.handled && (e.Handler < 2*time.Millisecond || e.Total < e.Handler) {
			t.Errorf("event %d: handler %v, total %v; want at least the handler's 2ms", i, e.Handler, e.Total)
		}
	}
}
