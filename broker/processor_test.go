package broker_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/store/memory"
)

// settleOnly is a Settler and nothing more: no Receive, no optional
// capability. It records the settling calls, by message.
type settleOnly struct {
	mu    sync.Mutex
	calls map[string]string // message -> op
	dl    map[string]broker.DeadLetter
}

var _ broker.Settler[string] = (*settleOnly)(nil)

func (s *settleOnly) set(m, op string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[m] = op
}

func (s *settleOnly) Message(m string) idem.Message         { return idem.Message{ID: m, Payload: []byte("p")} }
func (s *settleOnly) Delivery(string) broker.Delivery       { return broker.Delivery{Attempt: 1} }
func (s *settleOnly) Ack(_ context.Context, m string) error { s.set(m, "ack"); return nil }
func (s *settleOnly) Retry(_ context.Context, m string, _ time.Duration) error {
	s.set(m, "retry")
	return nil
}
func (s *settleOnly) DeadLetter(_ context.Context, m string, dl broker.DeadLetter) error {
	s.set(m, "dead_letter")
	s.mu.Lock()
	s.dl[m] = dl
	s.mu.Unlock()
	return nil
}

// TestNewProcessorRefuses: what NewConsumer refuses, NewProcessor and
// NewEngine refuse alike, with an error wrapping idem.ErrInvalidOptions.
func TestNewProcessorRefuses(t *testing.T) {
	g, err := idem.New(memory.New(), idem.Options{Scope: "refuse"})
	if err != nil {
		t.Fatal(err)
	}
	ok := broker.Handle(func(context.Context, string) ([]byte, error) { return nil, nil })
	tx := broker.HandleTx(func(context.Context, *sql.Tx, string) ([]byte, error) { return nil, nil })
	s := &settleOnly{}
	for _, c := range []struct {
		name   string
		t      broker.Settler[string]
		g      *idem.Guard
		h      broker.Handler[string]
		opts   broker.Options[string]
		engine bool // NewEngine refuses it too (it takes no settler)
		also   error
	}{
		{name: "nil settler", g: g, h: ok},
		{name: "nil guard", t: s, h: ok, engine: true},
		{name: "zero handler", t: s, g: g, engine: true, also: broker.ErrNoHandler},
		{name: "HandleTx without *sql.Tx", t: s, g: g, h: tx, engine: true, also: idem.ErrNoTx},
		{name: "negative Concurrency", t: s, g: g, h: ok, opts: broker.Options[string]{Concurrency: -1}, engine: true},
		{name: "negative MaxDeliveries", t: s, g: g, h: ok, opts: broker.Options[string]{MaxDeliveries: -1}, engine: true},
		{name: "negative ShutdownTimeout", t: s, g: g, h: ok, opts: broker.Options[string]{ShutdownTimeout: -1}, engine: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := broker.NewProcessor(c.t, c.g, c.h, c.opts)
			if p != nil || !errors.Is(err, idem.ErrInvalidOptions) || (c.also != nil && !errors.Is(err, c.also)) {
				t.Fatalf("NewProcessor = %v, %v; want an error wrapping ErrInvalidOptions (and %v)", p, err, c.also)
			}
			if !c.engine {
				return
			}
			e, err := broker.NewEngine(c.g, c.h, c.opts)
			if e != nil || !errors.Is(err, idem.ErrInvalidOptions) || (c.also != nil && !errors.Is(err, c.also)) {
				t.Fatalf("NewEngine = %v, %v; want an error wrapping ErrInvalidOptions (and %v)", e, err, c.also)
			}
		})
	}
	if c, err := broker.NewConsumer[string](nil, g, ok, broker.Options[string]{}); c != nil || !errors.Is(err, idem.ErrInvalidOptions) {
		t.Fatalf("NewConsumer(nil transport) = %v, %v; want an error wrapping ErrInvalidOptions", c, err)
	}
}

// TestProcessorOverSettler: a Processor runs one delivery end to end over
// a Settler that cannot receive: each outcome settled as a Consumer would,
// the dead letter with the engine's headers.
func TestProcessorOverSettler(t *testing.T) {
	g, err := idem.New(memory.New(), idem.Options{Scope: "settler"})
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{}
	var mu sync.Mutex
	h := broker.Handle(func(_ context.Context, m string) ([]byte, error) {
		mu.Lock()
		runs[m]++
		mu.Unlock()
		switch m {
		case "fails":
			return nil, errTransient
		case "poison":
			return nil, idem.Permanent(errors.New("bad payload"))
		}
		return []byte("done"), nil
	})
	s := &settleOnly{calls: map[string]string{}, dl: map[string]broker.DeadLetter{}}
	p, err := broker.NewProcessor[string](s, g, h, broker.Options[string]{Backoff: fixed(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		msg    string
		op     string
		out    idem.Outcome
		action idem.Action
		runs   int
	}{
		{"ok", "ack", idem.OutcomeProcessed, idem.ActionAck, 1},
		{"ok", "ack", idem.OutcomeDuplicate, idem.ActionAck, 1}, // the handler not run again
		{"fails", "retry", idem.OutcomeFailed, idem.ActionRetry, 1},
		{"poison", "dead_letter", idem.OutcomePermanent, idem.ActionDeadLetter, 1},
	} {
		r := p.Process(context.Background(), c.msg)
		if r.Result.Outcome != c.out || r.Action != c.action || r.BrokerErr != nil || s.calls[c.msg] != c.op || runs[c.msg] != c.runs {
			t.Fatalf("%s: report %+v, call %q, runs %d; want %v, %s, %q, %d runs", c.msg, r, s.calls[c.msg], runs[c.msg], c.out, c.action, c.op, c.runs)
		}
		if c.action == idem.ActionRetry && r.Delay != time.Minute {
			t.Fatalf("%s: retry delay %v, want the back-off", c.msg, r.Delay)
		}
	}
	if dl := s.dl["poison"]; dl.Reason != "permanent" || dl.Headers[idem.HeaderReason] != "permanent" || dl.Headers[idem.HeaderError] == "" {
		t.Fatalf("dead letter %+v, want reason permanent and the engine's headers", dl)
	}
}

// claimCounter is a store that refuses connections and counts the claims
// of each key, closing enough once every key of want has met n.
type claimCounter struct {
	switchStore
	mu     sync.Mutex
	claims map[string]int
	want   []string
	n      int
	enough chan struct{}
}

func (s *claimCounter) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	s.mu.Lock()
	s.claims[req.Key.ID]++
	all := true
	for _, k := range s.want {
		all = all && s.claims[k] >= s.n
	}
	if all && !isClosedChan(s.enough) {
		close(s.enough)
	}
	s.mu.Unlock()
	return s.switchStore.Claim(ctx, req)
}

func isClosedChan(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestEngineProcessorsShareOutageReports: the processors of one engine
// (a partition's, a session's each) report a store outage together, at
// most once per OutageReportEvery, not once per processor.
func TestEngineProcessorsShareOutageReports(t *testing.T) {
	store := &claimCounter{switchStore: switchStore{Store: memory.New()}, claims: map[string]int{},
		want: []string{"a", "b"}, n: 3, enough: make(chan struct{})}
	store.down.Store(true)
	g, err := idem.New(store, idem.Options{Scope: "outage"})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		reports []error
	)
	opts := broker.Options[string]{Backoff: fixed(time.Millisecond)}
	opts.Hooks.OnError = func(err error) {
		mu.Lock()
		reports = append(reports, err)
		mu.Unlock()
	}
	h := broker.Handle(func(context.Context, string) ([]byte, error) { return nil, nil })
	e, err := broker.NewEngine(g, h, opts)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	var wg sync.WaitGroup
	for _, m := range store.want {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := &settleOnly{calls: map[string]string{}, dl: map[string]broker.DeadLetter{}}
			// Held until every key met the outage n times, then handed back.
			if r := e.Processor(s).ProcessUntil(context.Background(), store.enough, m); r.Action != idem.ActionRetry || s.calls[m] != "retry" {
				t.Errorf("%s: report %+v, call %q; want a retry once the hold ends", m, r, s.calls[m])
			}
		}()
	}
	wg.Wait()
	outages := 0
	for _, err := range reports {
		var oe *broker.OutageError
		if !errors.As(err, &oe) {
			t.Fatalf("OnError: %v, want an *OutageError", err)
		}
		outages++
	}
	if most := 1 + int(time.Since(began)/broker.OutageReportEvery); outages < 1 || outages > most {
		t.Fatalf("%d outage reports from two processors in %v, want 1 to %d", outages, time.Since(began), most)
	}
}
