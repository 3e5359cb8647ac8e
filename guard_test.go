package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
)

// clock is a settable clock for leases; tests move time instead of sleeping.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func guard(t *testing.T, s idem.Store, opts idem.Options) *idem.Guard {
	t.Helper()
	if opts.Scope == "" {
		opts.Scope = "test"
	}
	g, err := idem.New(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func ok(v string) idem.Handler {
	return func(context.Context) ([]byte, error) { return []byte(v), nil }
}

func TestOptionsValidation(t *testing.T) {
	s := memory.New()
	bad := []idem.Options{
		{},
		{Scope: "a\x00"},
		{Scope: "s", Lease: -1},
		{Scope: "s", Lease: time.Millisecond},
		{Scope: "s", Lease: time.Hour, Retention: time.Minute},
		{Scope: "s", Stale: idem.StaleReconcile},
		{Scope: "s", Stale: 42},
	}
	for i, o := range bad {
		if _, err := idem.New(s, o); !errors.Is(err, idem.ErrInvalidOptions) {
			t.Errorf("case %d: New(%+v) = %v, want ErrInvalidOptions", i, o, err)
		}
	}
	if _, err := idem.New(nil, idem.Options{Scope: "s"}); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Errorf("New(nil store) = %v", err)
	}
	g := guard(t, s, idem.Options{Scope: "s"})
	o := g.Options()
	if o.Lease != idem.DefaultLease || o.Retention != idem.DefaultRetention || o.MaxResultSize != idem.DefaultMaxResultSize {
		t.Fatalf("defaults not applied: %+v", o)
	}
}

func TestDoProcessesOnceAndReplays(t *testing.T) {
	s := memory.New()
	var counter idem.Counter
	g := guard(t, s, idem.Options{Observer: &counter})
	ctx := context.Background()
	msg := idem.Message{ID: "o-1", Payload: []byte("pay")}
	runs := 0
	h := func(ctx context.Context) ([]byte, error) {
		runs++
		if k, found := idem.KeyFromContext(ctx); !found || k.ID != "o-1" || k.Scope != "test" {
			t.Errorf("handler context key = %v, %v", k, found)
		}
		return []byte("receipt-1"), nil
	}
	res, err := g.Do(ctx, msg, h)
	if err != nil || res.Outcome != idem.OutcomeProcessed || string(res.Value) != "receipt-1" {
		t.Fatalf("first Do = %+v, %v", res, err)
	}
	for range 3 {
		res, err = g.Do(ctx, msg, h)
		if err != nil || res.Outcome != idem.OutcomeDuplicate || string(res.Value) != "receipt-1" || idem.Decide(res, err) != idem.ActionAck {
			t.Fatalf("redelivery = %+v, %v", res, err)
		}
	}
	if runs != 1 {
		t.Fatalf("handler ran %d times", runs)
	}
	if counter.Count(idem.OutcomeProcessed) != 1 || counter.Count(idem.OutcomeDuplicate) != 3 {
		t.Fatalf("observer counts %v", counter.Counts())
	}
}

func TestHandlerErrorReleasesForRetry(t *testing.T) {
	s := memory.New()
	g := guard(t, s, idem.Options{})
	ctx := context.Background()
	msg := idem.Message{ID: "o-2", Payload: []byte("pay")}
	boom := errors.New("downstream timeout")
	res, err := g.Do(ctx, msg, func(context.Context) ([]byte, error) { return nil, boom })
	if !errors.Is(err, boom) || res.Outcome != idem.OutcomeFailed || idem.Decide(res, err) != idem.ActionRetry {
		t.Fatalf("failed Do = %v, %v", res.Outcome, err)
	}
	if r, _ := s.Get(ctx, idem.Key{Scope: "test", ID: "o-2"}); r.State != idem.StateReleased {
		t.Fatalf("after failure the record is %s, want released", r.State)
	}
	res, err = g.Do(ctx, msg, ok("second try"))
	if err != nil || res.Outcome != idem.OutcomeProcessed || res.Record.Attempts != 2 {
		t.Fatalf("redelivery after failure = %+v, %v", res, err)
	}
}

func TestPermanentError(t *testing.T) {
	g := guard(t, memory.New(), idem.Options{})
	bad := errors.New("card declined")
	res, err := g.Do(context.Background(), idem.Message{ID: "p"}, func(context.Context) ([]byte, error) {
		return nil, idem.Permanent(bad)
	})
	if !errors.Is(err, bad) || !errors.Is(err, idem.ErrPermanent) || res.Outcome != idem.OutcomePermanent {
		t.Fatalf("permanent Do = %v, %v", res.Outcome, err)
	}
	if idem.Decide(res, err) != idem.ActionDeadLetter || idem.DeadLetterReason(err) != "permanent" {
		t.Fatalf("permanent action %v reason %q", idem.Decide(res, err), idem.DeadLetterReason(err))
	}
	if idem.Permanent(nil) != nil {
		t.Fatal("Permanent(nil) != nil")
	}
}

func TestMissingKeyPolicies(t *testing.T) {
	ran := false
	h := func(context.Context) ([]byte, error) { ran = true; return nil, nil }
	g := guard(t, memory.New(), idem.Options{})
	res, err := g.Do(context.Background(), idem.Message{Payload: []byte("x")}, h)
	if !errors.Is(err, idem.ErrNoKey) || res.Outcome != idem.OutcomeNoKey || ran || idem.Decide(res, err) != idem.ActionDeadLetter {
		t.Fatalf("reject policy: %v %v ran=%v", res.Outcome, err, ran)
	}
	g = guard(t, memory.New(), idem.Options{MissingKey: idem.MissingKeyProcess})
	res, err = g.Do(context.Background(), idem.Message{Payload: []byte("x")}, h)
	if err != nil || res.Outcome != idem.OutcomeUnkeyed || !ran || idem.Decide(res, err) != idem.ActionAck {
		t.Fatalf("process policy: %v %v ran=%v", res.Outcome, err, ran)
	}
	// An invalid key is never processed without dedup.
	ran = false
	res, err = g.Do(context.Background(), idem.Message{ID: "bad\x00id"}, h)
	if !errors.Is(err, idem.ErrInvalidKey) || ran || res.Outcome != idem.OutcomeNoKey {
		t.Fatalf("invalid key: %v %v ran=%v", res.Outcome, err, ran)
	}
}

func TestConflict(t *testing.T) {
	g := guard(t, memory.New(), idem.Options{})
	ctx := context.Background()
	if _, err := g.Do(ctx, idem.Message{ID: "c", Payload: []byte("a")}, ok("r")); err != nil {
		t.Fatal(err)
	}
	res, err := g.Do(ctx, idem.Message{ID: "c", Payload: []byte("b")}, ok("r"))
	var ce *idem.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, idem.ErrConflict) || res.Outcome != idem.OutcomeConflict {
		t.Fatalf("conflict = %v, %v", res.Outcome, err)
	}
	if idem.DeadLetterReason(err) != "conflict" || !strings.Contains(err.Error(), "test/c") {
		t.Fatalf("reason %q, message %q", idem.DeadLetterReason(err), err)
	}
	// Without fingerprints the same key with other content is a duplicate.
	g = guard(t, memory.New(), idem.Options{Fingerprint: idem.NoFingerprint})
	g.Do(ctx, idem.Message{ID: "c", Payload: []byte("a")}, ok("r"))
	if res, err := g.Do(ctx, idem.Message{ID: "c", Payload: []byte("b")}, ok("r")); err != nil || res.Outcome != idem.OutcomeDuplicate {
		t.Fatalf("no fingerprint: %v %v", res.Outcome, err)
	}
}

// crashed leaves an in-progress claim behind, as an owner that died mid-way.
func crashed(t *testing.T, s idem.Store, clk *clock, id, payload string) {
	t.Helper()
	g := guard(t, s, idem.Options{Clock: clk.Now, Lease: time.Minute})
	hold := make(chan struct{})
	started := make(chan struct{})
	go g.Do(context.Background(), idem.Message{ID: id, Payload: []byte(payload)}, func(ctx context.Context) ([]byte, error) {
		close(started)
		<-hold // never returns within the test: the owner is "dead"
		return nil, nil
	})
	<-started
	t.Cleanup(func() { close(hold) })
}

func TestStalePolicies(t *testing.T) {
	ctx := context.Background()
	t.Run("retake", func(t *testing.T) {
		s, clk := memory.New(), newClock()
		crashed(t, s, clk, "s1", "p")
		g := guard(t, s, idem.Options{Clock: clk.Now, Lease: time.Minute, Stale: idem.StaleRetake})
		res, err := g.Do(ctx, idem.Message{ID: "s1", Payload: []byte("p")}, ok("x"))
		if !errors.Is(err, idem.ErrInProgress) || idem.Decide(res, err) != idem.ActionRetry {
			t.Fatalf("live owner: %v %v", res.Outcome, err)
		}
		clk.Advance(time.Minute)
		res, err = g.Do(ctx, idem.Message{ID: "s1", Payload: []byte("p")}, ok("x"))
		if err != nil || res.Outcome != idem.OutcomeProcessed || !res.Retaken {
			t.Fatalf("retake: %+v %v", res, err)
		}
	})
	t.Run("retake conflict", func(t *testing.T) {
		s, clk := memory.New(), newClock()
		crashed(t, s, clk, "s1", "p")
		clk.Advance(time.Hour)
		g := guard(t, s, idem.Options{Clock: clk.Now, Lease: time.Minute})
		res, err := g.Do(ctx, idem.Message{ID: "s1", Payload: []byte("other")}, ok("x"))
		if !errors.Is(err, idem.ErrConflict) || res.Outcome != idem.OutcomeConflict {
			t.Fatalf("retake with other content: %v %v", res.Outcome, err)
		}
	})
	t.Run("reconcile done", func(t *testing.T) {
		s, clk := memory.New(), newClock()
		crashed(t, s, clk, "s2", "p")
		clk.Advance(time.Hour)
		var seen idem.Record
		g := guard(t, s, idem.Options{Clock: clk.Now, Lease: time.Minute, Stale: idem.StaleReconcile,
			Reconcile: func(ctx context.Context, r idem.Record) ([]byte, bool, error) {
				seen = r
				return []byte("found upstream"), true, nil
			}})
		res, err := g.Do(ctx, idem.Message{ID: "s2", Payload: []byte("p")}, func(context.Context) ([]byte, error) {
			t.Fatal("handler ran although reconcile found the effect")
			return nil, nil
		})
		if err != nil || res.Outcome != idem.OutcomeReconciled || string(res.Value) != "found upstream" || seen.ID != "s2" {
			t.Fatalf("reconcile: %+v %v", res, err)
		}
		if r, _ := s.Get(ctx, idem.Key{Scope: "test", ID: "s2"}); r.State != idem.StateCompleted {
			t.Fatalf("record after reconcile: %s", r.State)
		}
	})
	t.Run("reconcile not done", func(t *testing.T) {
		s, clk := memory.New(), newClock()
		crashed(t, s, clk, "s3", "p")
		clk.Advance(time.Hour)
		g := guard(t, s, idem.Options{Clock: clk.Now, Lease: time.Minute, Stale: idem.StaleReconcile,
			Reconcile: func(context.Context, idem.Record) ([]byte, bool, error) { return nil, false, nil }})
		res, err := g.Do(ctx, idem.Message{ID: "s3", Payload: []byte("p")}, ok("redone"))
		if err != nil || res.Outcome != idem.OutcomeProcessed || string(res.Value) != "redone" {
			t.Fatalf("reconcile not done: %+v %v", res, err)
		}
	})
	t.Run("default parks", func(t *testing.T) {
		// The pattern's rule: a crashed owner may have done its side
		// effect, so without a Reconcile the record waits for an operator
		// and the handler never runs again unasked.
		s, clk := memory.New(), newClock()
		crashed(t, s, clk, "s5", "p")
		clk.Advance(time.Hour)
		g := guard(t, s, idem.Options{Clock: clk.Now, Lease: time.Minute})
		if p := g.Options().Stale; p != idem.StalePark {
			t.Fatalf("default policy without Reconcile: %v, want park", p)
		}
		res, err := g.Do(ctx, idem.Message{ID: "s5", Payload: []byte("p")}, func(context.Context) ([]byte, error) {
			t.Fatal("the default policy ran the handler over a crashed owner")
			return nil, nil
		})
		if !errors.Is(err, idem.ErrStale) || res.Outcome != idem.OutcomeStale || idem.DeadLetterReason(err) != "parked" {
			t.Fatalf("default policy: %v %v, want parked", res.Outcome, err)
		}
		if r, _ := s.Get(ctx, idem.Key{Scope: "test", ID: "s5"}); r.State != idem.StateInProgress || r.Attempts != 1 {
			t.Fatalf("default policy changed the parked record: %+v", r)
		}
	})
	t.Run("default reconciles", func(t *testing.T) {
		s, clk := memory.New(), newClock()
		crashed(t, s, clk, "s6", "p")
		clk.Advance(time.Hour)
		var derived string
		g := guard(t, s, idem.Options{Clock: clk.Now, Lease: time.Minute,
			Reconcile: func(ctx context.Context, r idem.Record) ([]byte, bool, error) {
				derived = idem.DeriveKey(ctx, "charge") // the key the crashed owner's call carried
				return []byte("found"), true, nil
			}})
		if p := g.Options().Stale; p != idem.StaleReconcile {
			t.Fatalf("default policy with Reconcile: %v, want reconcile", p)
		}
		res, err := g.Do(ctx, idem.Message{ID: "s6", Payload: []byte("p")}, func(ctx context.Context) ([]byte, error) {
			t.Fatal("handler ran although reconcile found the effect")
			return nil, nil
		})
		if err != nil || res.Outcome != idem.OutcomeReconciled {
			t.Fatalf("default with Reconcile: %v %v", res.Outcome, err)
		}
		if want := (idem.Key{Scope: "test", ID: "s6"}).Derive("charge"); derived == "" || derived != want {
			t.Fatalf("DeriveKey inside Reconcile: %q, want the handler's %q", derived, want)
		}
	})
	t.Run("park", func(t *testing.T) {
		s, clk := memory.New(), newClock()
		crashed(t, s, clk, "s4", "p")
		clk.Advance(time.Hour)
		g := guard(t, s, idem.Options{Clock: clk.Now, Lease: time.Minute, Stale: idem.StalePark})
		res, err := g.Do(ctx, idem.Message{ID: "s4", Payload: []byte("p")}, ok("x"))
		var se *idem.StateError
		if !errors.Is(err, idem.ErrStale) || !errors.As(err, &se) || res.Outcome != idem.OutcomeStale ||
			idem.Decide(res, err) != idem.ActionDeadLetter || idem.DeadLetterReason(err) != "parked" {
			t.Fatalf("park: %v %v", res.Outcome, err)
		}
		// The operator resolves it by releasing with the record's token.
		if err := s.Release(ctx, idem.ReleaseRequest{Key: se.Key, Token: se.Record.Token, Now: clk.Now()}); err != nil {
			t.Fatal(err)
		}
		if res, err := g.Do(ctx, idem.Message{ID: "s4", Payload: []byte("p")}, ok("x")); err != nil || res.Outcome != idem.OutcomeProcessed {
			t.Fatalf("after operator release: %v %v", res.Outcome, err)
		}
	})
}

// renewSignal wraps a store and reports each successful renewal.
type renewSignal struct {
	idem.Store
	renewed chan struct{}
}

func (r *renewSignal) Renew(ctx context.Context, req idem.RenewRequest) error {
	err := r.Store.Renew(ctx, req)
	if err == nil {
		select {
		case r.renewed <- struct{}{}:
		default:
		}
	}
	return err
}

func TestHeartbeatRenewsLease(t *testing.T) {
	clk := newClock()
	s := &renewSignal{Store: memory.New(), renewed: make(chan struct{}, 1)}
	g := guard(t, s, idem.Options{Clock: clk.Now, Lease: 300 * time.Millisecond})
	other := guard(t, s, idem.Options{Clock: clk.Now, Lease: 300 * time.Millisecond})
	msg := idem.Message{ID: "long", Payload: []byte("p")}
	res, err := g.Do(context.Background(), msg, func(ctx context.Context) ([]byte, error) {
		clk.Advance(time.Hour) // far past the original lease
		<-s.renewed            // the heartbeat renewed it from "now"
		r, err := other.Do(ctx, msg, ok("intruder"))
		if !errors.Is(err, idem.ErrInProgress) {
			return nil, fmt.Errorf("while renewed, another delivery got %v, %v", r.Outcome, err)
		}
		return []byte("long done"), nil
	})
	if err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("long handler: %v %v", res.Outcome, err)
	}
}

func TestLeaseLostCancelsHandler(t *testing.T) {
	clk := newClock()
	s := memory.New()
	g := guard(t, s, idem.Options{Clock: clk.Now, Lease: 30 * time.Millisecond})
	msg := idem.Message{ID: "zombie", Payload: []byte("p")}
	res, err := g.Do(context.Background(), msg, func(ctx context.Context) ([]byte, error) {
		clk.Advance(time.Hour)
		// Another instance takes the key over while this handler stalls.
		if r, err := guard(t, s, idem.Options{Clock: clk.Now, Lease: time.Hour, Stale: idem.StaleRetake}).Do(context.WithoutCancel(ctx), msg, ok("new owner")); err != nil || !r.Retaken {
			return nil, fmt.Errorf("takeover: %v %v", r.Outcome, err)
		}
		<-ctx.Done() // the next renewal finds the lease lost
		return nil, context.Cause(ctx)
	})
	if !errors.Is(err, idem.ErrLeaseLost) || res.Outcome != idem.OutcomeLeaseLost || idem.Decide(res, err) != idem.ActionRetry {
		t.Fatalf("zombie: %v %v", res.Outcome, err)
	}
	r, _ := s.Get(context.Background(), idem.Key{Scope: "test", ID: "zombie"})
	if r.State != idem.StateCompleted || string(r.Result) != "new owner" {
		t.Fatalf("the zombie disturbed the new owner's record: %+v", r)
	}
}

func TestPanicReleases(t *testing.T) {
	s := memory.New()
	g := guard(t, s, idem.Options{})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		g.Do(context.Background(), idem.Message{ID: "boom"}, func(context.Context) ([]byte, error) { panic("boom") })
	}()
	if r, _ := s.Get(context.Background(), idem.Key{Scope: "test", ID: "boom"}); r.State != idem.StateReleased {
		t.Fatalf("after panic: %s", r.State)
	}
}

func TestCompletesAfterCallerCancels(t *testing.T) {
	s := memory.New()
	g := guard(t, s, idem.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	res, err := g.Do(ctx, idem.Message{ID: "shutdown"}, func(context.Context) ([]byte, error) {
		cancel() // shutdown begins while the handler finishes its work
		return []byte("done"), nil
	})
	if err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("Do = %v %v", res.Outcome, err)
	}
	if r, _ := s.Get(context.Background(), idem.Key{Scope: "test", ID: "shutdown"}); r.State != idem.StateCompleted {
		t.Fatalf("record after shutdown: %s", r.State)
	}
}

// failingStore fails every operation, as a store that is down.
type failingStore struct{ idem.Store }

var errDown = errors.New("connection refused")

func (failingStore) Claim(context.Context, idem.ClaimRequest) (idem.Claim, error) {
	return idem.Claim{}, errDown
}

func TestStoreDownIsRetryable(t *testing.T) {
	g := guard(t, failingStore{memory.New()}, idem.Options{})
	res, err := g.Do(context.Background(), idem.Message{ID: "x"}, func(context.Context) ([]byte, error) {
		t.Fatal("handler ran without a claim")
		return nil, nil
	})
	var se *idem.StoreError
	if !errors.As(err, &se) || !errors.Is(err, errDown) || se.Op != "claim" || res.Outcome != idem.OutcomeStoreError || idem.Decide(res, err) != idem.ActionRetry {
		t.Fatalf("store down: %v %v", res.Outcome, err)
	}
}

func TestDoTxNeedsTxStore(t *testing.T) {
	g := guard(t, memory.New(), idem.Options{})
	_, err := idem.DoTx(context.Background(), g, idem.Message{ID: "x"}, func(context.Context, *struct{}) ([]byte, error) { return nil, nil })
	if !errors.Is(err, idem.ErrNoTx) {
		t.Fatalf("DoTx on memory = %v, want ErrNoTx", err)
	}
}

func TestDeriveKey(t *testing.T) {
	ctx := idem.ContextWithKey(context.Background(), idem.Key{Scope: "billing", ID: "order-1"})
	a, b := idem.DeriveKey(ctx, "charge"), idem.DeriveKey(ctx, "charge")
	if a != b || !strings.HasPrefix(a, "idem-") || len(a) != 45 {
		t.Fatalf("derived keys %q %q", a, b)
	}
	if a == idem.DeriveKey(ctx, "refund") {
		t.Fatal("names do not separate derived keys")
	}
	other := idem.ContextWithKey(context.Background(), idem.Key{Scope: "shipping", ID: "order-1"})
	if a == idem.DeriveKey(other, "charge") {
		t.Fatal("scopes do not separate derived keys")
	}
	if idem.DeriveKey(context.Background(), "charge") != "" {
		t.Fatal("derived a key without one in the context")
	}
}

func TestSlogObserver(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g := guard(t, memory.New(), idem.Options{Observer: idem.NewSlogObserver(l)})
	g.Do(context.Background(), idem.Message{ID: "log-1", Payload: []byte("a")}, ok("r"))
	g.Do(context.Background(), idem.Message{ID: "log-1", Payload: []byte("b")}, ok("r"))
	out := buf.String()
	for _, want := range []string{`"key":"log-1"`, `"scope":"test"`, `"outcome":"processed"`, `"outcome":"conflict"`, `"level":"ERROR"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "tx_runs") {
		t.Errorf("tx_runs logged for a message whose transaction ran once or never:\n%s", out)
	}
	buf.Reset()
	idem.NewSlogObserver(l).Observe(context.Background(), idem.Event{Key: idem.Key{Scope: "s", ID: "k"}, Mode: "tx", Outcome: idem.OutcomeDuplicate, TxRuns: 2})
	if !strings.Contains(buf.String(), `"tx_runs":2`) {
		t.Errorf("a rerun transaction's log lacks tx_runs:\n%s", buf.String())
	}
}

func TestSweeper(t *testing.T) {
	s, clk := memory.New(), newClock()
	g := guard(t, s, idem.Options{Clock: clk.Now, Retention: time.Hour})
	for i := range 2500 {
		g.Do(context.Background(), idem.Message{ID: fmt.Sprint(i)}, ok(""))
	}
	clk.Advance(2 * time.Hour)
	g.Do(context.Background(), idem.Message{ID: "fresh"}, ok(""))
	sw := &idem.Sweeper{Store: s, BatchSize: 1000, Clock: clk.Now}
	n, err := sw.SweepOnce(context.Background())
	if err != nil || n != 2500 || s.Len() != 1 {
		t.Fatalf("SweepOnce = %d, %v; %d left", n, err, s.Len())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	swept := make(chan idem.Sweep, 1)
	sw.Observer = sweepObserver(swept)
	g.Do(context.Background(), idem.Message{ID: "expiring"}, ok(""))
	clk.Advance(2 * time.Hour)
	go func() { done <- sw.Run(ctx) }()
	if s := <-swept; s.Deleted != 2 || s.Err != nil {
		t.Errorf("the observer saw the sweep %+v, want 2 deleted, no error", s)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel = %v", err)
	}
}

func TestHandlerSignalsDuplicateOrSuperseded(t *testing.T) {
	s := memory.New()
	g := guard(t, s, idem.Options{})
	ctx := context.Background()
	res, err := g.Do(ctx, idem.Message{ID: "e1"}, func(context.Context) ([]byte, error) {
		return nil, &idem.DuplicateError{Result: []byte("row 7")}
	})
	if err != nil || res.Outcome != idem.OutcomeDuplicate || string(res.Value) != "row 7" {
		t.Fatalf("entity duplicate: %+v %v", res, err)
	}
	if r, _ := s.Get(ctx, idem.Key{Scope: "test", ID: "e1"}); r.State != idem.StateCompleted {
		t.Fatalf("record after an entity duplicate: %s", r.State)
	}
	res, err = g.Do(ctx, idem.Message{ID: "e2"}, func(context.Context) ([]byte, error) {
		return nil, fmt.Errorf("order 9 at version 3: %w", idem.ErrSuperseded)
	})
	if err != nil || res.Outcome != idem.OutcomeSuperseded || idem.Decide(res, err) != idem.ActionAck {
		t.Fatalf("superseded: %+v %v", res, err)
	}
	res, err = g.Do(ctx, idem.Message{ID: "e3"}, func(context.Context) ([]byte, error) {
		return nil, &idem.ConflictError{Key: idem.Key{Scope: "test", ID: "e3"}}
	})
	if !errors.Is(err, idem.ErrConflict) || res.Outcome != idem.OutcomeConflict || idem.Decide(res, err) != idem.ActionDeadLetter {
		t.Fatalf("handler conflict: %+v %v", res, err)
	}
}

func TestGuardWith(t *testing.T) {
	s := memory.New()
	g := guard(t, s, idem.Options{Scope: "base", Lease: time.Minute})
	w, err := g.With("orders-group", idem.HeaderKey("idempotency-key"))
	if err != nil {
		t.Fatal(err)
	}
	if w.Options().Lease != time.Minute || w.Options().Scope != "orders-group" {
		t.Fatalf("With lost options: %+v", w.Options())
	}
	res, err := w.Do(context.Background(), idem.Message{Headers: map[string]string{"idempotency-key": "k"}}, ok("r"))
	if err != nil || res.Key != (idem.Key{Scope: "orders-group", ID: "k"}) {
		t.Fatalf("With guard: %+v %v", res, err)
	}
	if _, err := g.With("", nil); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Fatalf("With empty scope = %v", err)
	}
}

func TestExponentialBackoff(t *testing.T) {
	b := idem.ExponentialBackoff(100*time.Millisecond, time.Second)
	for attempt, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 50: time.Second} {
		for range 20 {
			if d := b(attempt); d < want/2 || d > want {
				t.Fatalf("attempt %d: %v outside [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
}

// sweepObserver is an idem.SweepObserver that hands on the sweeps it sees
// while the channel has room.
type sweepObserver chan idem.Sweep

func (sweepObserver) Observe(context.Context, idem.Event) {}

func (c sweepObserver) ObserveSweep(_ context.Context, s idem.Sweep) {
	select {
	case c <- s:
	default:
	}
}
