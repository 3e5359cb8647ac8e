package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/store/memory"
)

// fmsg is one delivery of the fake transport.
type fmsg struct {
	id      string
	payload string
	attempt int
	last    bool
}

// call is one settling call the engine made on the fake transport.
type call struct {
	op    string // ack, retry, dead_letter, dead_letter_failed, return
	id    string
	delay time.Duration
	dl    broker.DeadLetter
	at    time.Time
	kas   int64 // keep-alives made before the call
}

// fake is an in-memory Transport that records every settling call and
// implements every optional interface, each switched by its field.
type fake struct {
	in         chan *fmsg
	calls      chan call
	kaEvery    time.Duration // KeepAliveEvery; 0: none
	kaErr      error         // what KeepAlive returns
	noDelay    bool          // RetryDelays false
	redeliver  bool          // Retry puts the message back
	countRetry bool          // a redelivery counts as a delivery (attempt+1)
	dlFail     atomic.Int32  // how many DeadLetter calls fail
	keepAlives atomic.Int64
}

var errDLDown = errors.New("dead-letter destination unavailable")

func newFake() *fake { return newFakeN(1024) }

// newFakeN is a fake that buffers n deliveries and n calls.
func newFakeN(n int) *fake { return &fake{in: make(chan *fmsg, n), calls: make(chan call, n)} }

func (f *fake) record(op string, m *fmsg, delay time.Duration, dl broker.DeadLetter) {
	f.calls <- call{op: op, id: m.id, delay: delay, dl: dl, at: time.Now(), kas: f.keepAlives.Load()}
}

func (f *fake) Receive(ctx context.Context, n int) ([]*fmsg, error) {
	select {
	case m := <-f.in:
		out := []*fmsg{m}
		for len(out) < n {
			select {
			case m := <-f.in:
				out = append(out, m)
			default:
				return out, nil
			}
		}
		return out, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fake) Message(m *fmsg) idem.Message {
	return idem.Message{ID: m.id, Payload: []byte(m.payload)}
}

func (f *fake) Delivery(m *fmsg) broker.Delivery {
	return broker.Delivery{Attempt: m.attempt, Last: m.last}
}

func (f *fake) Ack(_ context.Context, m *fmsg) error {
	f.record("ack", m, 0, broker.DeadLetter{})
	return nil
}

func (f *fake) Retry(_ context.Context, m *fmsg, delay time.Duration) error {
	f.record("retry", m, delay, broker.DeadLetter{})
	if f.redeliver {
		again := *m
		if f.countRetry {
			again.attempt = max(again.attempt, 1) + 1
		}
		f.in <- &again
	}
	return nil
}

func (f *fake) DeadLetter(_ context.Context, m *fmsg, dl broker.DeadLetter) error {
	if f.dlFail.Add(-1) >= 0 {
		f.record("dead_letter_failed", m, 0, dl)
		return errDLDown
	}
	f.record("dead_letter", m, 0, dl)
	return nil
}

func (f *fake) KeepAlive(context.Context, *fmsg) error {
	f.keepAlives.Add(1)
	return f.kaErr
}

func (f *fake) KeepAliveEvery(*fmsg) time.Duration { return f.kaEvery }

func (f *fake) RetryDelays() bool { return !f.noDelay }

func (f *fake) Return(_ context.Context, m *fmsg) error {
	f.record("return", m, 0, broker.DeadLetter{})
	return nil
}

// Drain gives back what is still buffered, as a prefetch would.
func (f *fake) Drain(context.Context) []*fmsg {
	var out []*fmsg
	for {
		select {
		case m := <-f.in:
			out = append(out, m)
		default:
			return out
		}
	}
}

// next is the transport's next settling call.
func (f *fake) next(t testing.TB) call {
	t.Helper()
	select {
	case c := <-f.calls:
		return c
	case <-time.After(20 * time.Second):
		t.Fatal("no settling call within 20s")
		return call{}
	}
}

// nextOf takes the next n settling calls, failing t unless each is op,
// and returns the ids they settled.
func (f *fake) nextOf(t testing.TB, n int, op, why string) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for range n {
		c := f.next(t)
		if c.op != op {
			t.Fatalf("%s %s, want %s", c.op, c.id, why)
		}
		ids[c.id] = true
	}
	return ids
}

// none fails t if the engine settled anything so far.
func (f *fake) none(t *testing.T, why string) {
	t.Helper()
	select {
	case c := <-f.calls:
		t.Fatalf("%s: the engine called %s on %s (delay %v, reason %q)", why, c.op, c.id, c.delay, c.dl.Reason)
	default:
	}
}

// switchStore is a store that refuses connections while down, as a
// PostgreSQL being restarted does: a non-data error, not the message's
// fault.
type switchStore struct {
	idem.Store
	down atomic.Bool
}

var errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

func (s *switchStore) refused() error {
	if s.down.Load() {
		return errRefused
	}
	return nil
}

func (s *switchStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := s.refused(); err != nil {
		return idem.Claim{}, err
	}
	return s.Store.Claim(ctx, req)
}

func (s *switchStore) Complete(ctx context.Context, req idem.CompleteRequest) error {
	if err := s.refused(); err != nil {
		return err
	}
	return s.Store.Complete(ctx, req)
}

func (s *switchStore) Release(ctx context.Context, req idem.ReleaseRequest) error {
	if err := s.refused(); err != nil {
		return err
	}
	return s.Store.Release(ctx, req)
}

func (s *switchStore) Renew(ctx context.Context, req idem.RenewRequest) error {
	if err := s.refused(); err != nil {
		return err
	}
	return s.Store.Renew(ctx, req)
}

func (s *switchStore) Get(ctx context.Context, key idem.Key) (idem.Record, error) {
	if err := s.refused(); err != nil {
		return idem.Record{}, err
	}
	return s.Store.Get(ctx, key)
}

// outcomes counts the guard's events by outcome.
type outcomes struct {
	mu sync.Mutex
	n  map[idem.Outcome]int
}

func (o *outcomes) Observe(_ context.Context, e idem.Event) {
	o.mu.Lock()
	o.n[e.Outcome]++
	o.mu.Unlock()
}

func (o *outcomes) get(out idem.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[out]
}

// engine is one test's engine, its guard and what its hooks saw.
type engine struct {
	f       *fake
	g       *idem.Guard
	seen    *outcomes
	reports chan broker.Report
	errs    chan error
	runs    atomic.Int32 // handler runs
	cancel  context.CancelFunc
	done    chan error
}

// newEngine builds a guard on store (a fresh memory store when nil), with
// gopts, and the engine over f running fn (a handler that counts its runs
// and returns fn's answer; nil: succeed).
func newEngine(t testing.TB, f *fake, store idem.Store, gopts idem.Options, fn func(ctx context.Context, m *fmsg) ([]byte, error), opts broker.Options[*fmsg]) *engine {
	t.Helper()
	if store == nil {
		store = memory.New()
	}
	e := &engine{f: f, seen: &outcomes{n: map[idem.Outcome]int{}},
		reports: make(chan broker.Report, 1024), errs: make(chan error, 1024), done: make(chan error, 1)}
	gopts.Scope = "engine"
	gopts.Observer = e.seen
	g, err := idem.New(store, gopts)
	if err != nil {
		t.Fatal(err)
	}
	e.g = g
	h := broker.Handle(func(ctx context.Context, m *fmsg) ([]byte, error) {
		e.runs.Add(1)
		if fn == nil {
			return []byte("done"), nil
		}
		return fn(ctx, m)
	})
	opts.Hooks.AfterSettle = func(_ context.Context, _ *fmsg, r broker.Report) { e.reports <- r }
	opts.Hooks.OnError = func(err error) {
		select {
		case e.errs <- err:
		default:
		}
	}
	c, err := broker.NewConsumer[*fmsg](f, g, h, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() { e.done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-e.done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	return e
}

// report is the next Report from AfterSettle.
func (e *engine) report(t *testing.T) broker.Report {
	t.Helper()
	select {
	case r := <-e.reports:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no report within 20s")
		return broker.Report{}
	}
}

// expect fails t unless the engine's next call is op, the next report's
// outcome is out and the handler has run runs times; it returns the call.
func (e *engine) expect(t *testing.T, op string, out idem.Outcome, runs int32) call {
	t.Helper()
	c := e.f.next(t)
	if c.op != op {
		t.Fatalf("%s %s, want %s", c.op, c.id, op)
	}
	if r := e.report(t); r.Result.Outcome != out {
		t.Fatalf("report %+v, want outcome %v", r, out)
	}
	if n := e.runs.Load(); n != runs {
		t.Fatalf("handler ran %d times, want %d", n, runs)
	}
	return c
}

// deadLettered fails t unless the engine's next call is a dead letter
// with reason, at the transport's attempt, carrying every header of a call
// that read a record, after runs handler runs; it returns the call.
func (e *engine) deadLettered(t *testing.T, reason string, attempt int, runs int32) call {
	t.Helper()
	c := e.f.next(t)
	if c.op != "dead_letter" || c.dl.Reason != reason || c.dl.Attempt != attempt {
		t.Fatalf("%s reason %q attempt %d, want dead_letter %s attempt %d", c.op, c.dl.Reason, c.dl.Attempt, reason, attempt)
	}
	wantHeaders(t, c.dl.Headers, allHeaders...)
	if n := e.runs.Load(); n != runs {
		t.Fatalf("handler ran %d times, want %d", n, runs)
	}
	return c
}

// stop ends Run and waits for it, at most 20s.
func (e *engine) stop(t *testing.T) {
	t.Helper()
	e.cancel()
	select {
	case err := <-e.done:
		e.done <- err // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of its context's end")
	}
}

// waitFor polls cond until it holds, failing t after 20s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// holdElsewhere claims m's key through g as another instance would, its
// handler blocked; the returned function lets that handler return err
// (nil: the key is completed; an error: it is released).
func holdElsewhere(t testing.TB, g *idem.Guard, m *fmsg) (finish func(err error)) {
	t.Helper()
	started, result, done := make(chan struct{}), make(chan error), make(chan struct{})
	go func() {
		defer close(done)
		g.Do(context.Background(), idem.Message{ID: m.id, Payload: []byte(m.payload)}, func(context.Context) ([]byte, error) {
			close(started)
			return []byte("elsewhere"), <-result
		})
	}()
	<-started
	var once sync.Once
	finish = func(err error) {
		once.Do(func() {
			result <- err
			<-done
		})
	}
	t.Cleanup(func() { finish(nil) })
	return finish
}

// fixed is a back-off of d for every attempt.
func fixed(d time.Duration) func(int) time.Duration { return func(int) time.Duration { return d } }

var errTransient = errors.New("downstream briefly unavailable")

// wantHeaders fails t unless h holds exactly the idem dead-letter headers
// names among broker.DeadLetterHeaderNames, each with a value.
func wantHeaders(t *testing.T, h map[string]string, names ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
		if h[n] == "" {
			t.Errorf("dead letter without %s: %v", n, h)
		}
	}
	for _, n := range broker.DeadLetterHeaderNames {
		if _, ok := h[n]; ok && !want[n] {
			t.Errorf("dead letter with %s = %q, not expected here: %v", n, h[n], h)
		}
	}
}

// allHeaders are the headers of a dead letter whose call read a record.
var allHeaders = broker.DeadLetterHeaderNames

func TestEngineProcessedAcked(t *testing.T) {
	f := newFake()
	e := newEngine(t, f, nil, idem.Options{}, nil, broker.Options[*fmsg]{})
	f.in <- &fmsg{id: "a", payload: "p"}
	e.expect(t, "ack", idem.OutcomeProcessed, 1)
}

func TestEngineDuplicateAckedWithoutHandler(t *testing.T) {
	f := newFake()
	e := newEngine(t, f, nil, idem.Options{}, nil, broker.Options[*fmsg]{})
	if _, err := e.g.Do(context.Background(), idem.Message{ID: "a", Payload: []byte("p")}, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	f.in <- &fmsg{id: "a", payload: "p"}
	e.expect(t, "ack", idem.OutcomeDuplicate, 0)
}

func TestEngineConflictDeadLettered(t *testing.T) {
	f := newFake()
	e := newEngine(t, f, nil, idem.Options{}, nil, broker.Options[*fmsg]{})
	orig, reuse := idem.Message{ID: "a", Payload: []byte("first")}, &fmsg{id: "a", payload: "other", attempt: 2}
	if _, err := e.g.Do(context.Background(), orig, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	f.in <- reuse
	c := e.deadLettered(t, "conflict", 2, 0)
	fpOrig, _ := e.g.Fingerprint(orig)
	fpReuse, _ := e.g.Fingerprint(f.Message(reuse))
	for name, want := range map[string]string{
		idem.HeaderReason: "conflict", idem.HeaderDeadLetterKey: "engine/a", idem.HeaderFingerprint: fpReuse,
		idem.HeaderStoredFingerprint: fpOrig, idem.HeaderStoredState: string(idem.StateCompleted), idem.HeaderStoredAttempts: "1",
	} {
		if got := c.dl.Headers[name]; got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

func TestEnginePermanentDeadLettered(t *testing.T) {
	f := newFake()
	e := newEngine(t, f, nil, idem.Options{}, func(context.Context, *fmsg) ([]byte, error) {
		return nil, idem.Permanent(errors.New("card rejected"))
	}, broker.Options[*fmsg]{})
	f.in <- &fmsg{id: "a", payload: "p"}
	c := e.deadLettered(t, "permanent", 1, 1)
	if got := c.dl.Headers[idem.HeaderError]; got != "card rejected" {
		t.Errorf("%s = %q", idem.HeaderError, got)
	}
}

// A key in progress elsewhere is held (kept alive, claimed again) without
// a retry, and acked as a duplicate once its holder completes it.
func TestEngineInProgressHeldUntilHolderCompletes(t *testing.T) {
	f := newFake()
	f.kaEvery = 10 * time.Millisecond
	e := newEngine(t, f, nil, idem.Options{Lease: 30 * time.Second}, nil, broker.Options[*fmsg]{Backoff: fixed(10 * time.Millisecond)})
	m := &fmsg{id: "a", payload: "p"}
	finish := holdElsewhere(t, e.g, m)
	f.in <- m
	waitFor(t, "claimed again three times and kept alive", func() bool {
		return e.seen.get(idem.OutcomeInProgress) >= 3 && f.keepAlives.Load() >= 2
	})
	f.none(t, "held in progress elsewhere")
	finish(nil)
	e.expect(t, "ack", idem.OutcomeDuplicate, 0) // the holder's result, the handler not run again
}

// A holder that releases its key (its handler failed) is seen within
// about a second, the engine's longest pace of claims, not at the lease
// end the waiter read: with a 30 s lease, the waiter processes the message
// well before.
func TestEngineInProgressReleaseNoticed(t *testing.T) {
	f := newFake()
	// A back-off far longer than the engine's hold pace: only the pace's
	// bound makes the release seen early.
	e := newEngine(t, f, nil, idem.Options{Lease: 30 * time.Second}, nil, broker.Options[*fmsg]{Backoff: fixed(time.Minute)})
	m := &fmsg{id: "a", payload: "p"}
	finish := holdElsewhere(t, e.g, m)
	f.in <- m
	waitFor(t, "held", func() bool { return e.seen.get(idem.OutcomeInProgress) >= 1 })
	released := time.Now()
	finish(errors.New("holder's handler failed"))
	took := e.expect(t, "ack", idem.OutcomeProcessed, 1).at.Sub(released)
	if took > 10*time.Second {
		t.Fatalf("the release was noticed %v after it, near the 30s lease end rather than within the hold pace", took)
	}
	t.Logf("release noticed after %v", took)
}

func TestEngineMaxHoldRetriesUntilLease(t *testing.T) {
	f := newFake()
	const maxHold = 200 * time.Millisecond
	e := newEngine(t, f, nil, idem.Options{Lease: 30 * time.Second}, nil, broker.Options[*fmsg]{Backoff: fixed(10 * time.Millisecond), MaxHold: maxHold})
	m := &fmsg{id: "a", payload: "p"}
	holdElsewhere(t, e.g, m)
	start := time.Now()
	f.in <- m
	c := f.next(t)
	if c.op != "retry" {
		t.Fatalf("%s, want retry", c.op)
	}
	if held := c.at.Sub(start); held < maxHold {
		t.Fatalf("handed back after %v, before MaxHold %v", held, maxHold)
	}
	// The delay runs until the holder's lease ends (30s from its claim,
	// plus a jitter of at most a second).
	if c.delay < 20*time.Second || c.delay > 31100*time.Millisecond {
		t.Fatalf("retry delay %v, want the time until the holder's lease ends", c.delay)
	}
	if n := e.seen.get(idem.OutcomeInProgress); n < 2 {
		t.Fatalf("%d claims: handed back without a hold", n)
	}
}

// A store that refuses connections holds the delivery, kept alive, with
// no retry and no dead letter, reported as an OutageError at most once per
// OutageReportEvery; once the store is back, the message is processed.
func TestEngineStoreOutageHeld(t *testing.T) {
	f := newFake()
	f.kaEvery = 10 * time.Millisecond
	store := &switchStore{Store: memory.New()}
	store.down.Store(true)
	began := time.Now()
	e := newEngine(t, f, store, idem.Options{}, nil, broker.Options[*fmsg]{Backoff: fixed(5 * time.Millisecond), MaxDeliveries: 2})
	f.in <- &fmsg{id: "a", payload: "p", attempt: 1}
	f.in <- &fmsg{id: "b", payload: "p", attempt: 1}
	waitFor(t, "many claims met the outage, the deliveries kept alive", func() bool {
		return e.seen.get(idem.OutcomeStoreError) >= 20 && f.keepAlives.Load() >= 4
	})
	f.none(t, "store down")
	if n := e.runs.Load(); n != 0 {
		t.Fatalf("handler ran %d times while the store was down", n)
	}
	outages := 0
drain:
	for {
		select {
		case err := <-e.errs:
			var oe *broker.OutageError
			if !errors.As(err, &oe) {
				t.Fatalf("OnError: %v, want an *OutageError", err)
			}
			var op *net.OpError
			if !errors.As(err, &op) || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("OutageError %v does not unwrap to the store's error", err)
			}
			outages++
		default:
			break drain
		}
	}
	if most := 1 + int(time.Since(began)/broker.OutageReportEvery); outages < 1 || outages > most {
		t.Fatalf("%d outage reports in %v, want 1 to %d", outages, time.Since(began), most)
	}
	store.down.Store(false)
	for range 2 {
		if c := f.next(t); c.op != "ack" {
			t.Fatalf("%s %s once the store is back, want ack", c.op, c.id)
		}
	}
	if n := e.runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want once per message", n)
	}
}

// MaxDeliveries counts the handler's failures by the record's attempts,
// even where the transport's attempt stays 1 (a broker that keeps no
// count).
func TestEngineMaxDeliveriesByRecordAttempts(t *testing.T) {
	f := newFake()
	f.redeliver = true
	e := newEngine(t, f, nil, idem.Options{}, func(context.Context, *fmsg) ([]byte, error) {
		return nil, errTransient
	}, broker.Options[*fmsg]{Backoff: fixed(time.Millisecond), MaxDeliveries: 3})
	f.in <- &fmsg{id: "a", payload: "p"}
	for i := range 2 {
		if c := f.next(t); c.op != "retry" {
			t.Fatalf("call %d: %s, want retry", i+1, c.op)
		}
	}
	// Exactly MaxDeliveries runs, the transport's attempt still 1.
	c := e.deadLettered(t, broker.ReasonMaxDeliver, 1, 3)
	if got := c.dl.Headers[idem.HeaderStoredAttempts]; got != "3" {
		t.Errorf("%s = %q, want 3", idem.HeaderStoredAttempts, got)
	}
}

// A transient failure on the broker's last allowed delivery is
// dead-lettered with idem's headers, never handed to a broker that would
// drop it.
func TestEngineLastDeliveryNeverRetried(t *testing.T) {
	f := newFake()
	e := newEngine(t, f, nil, idem.Options{}, func(context.Context, *fmsg) ([]byte, error) {
		return nil, errTransient
	}, broker.Options[*fmsg]{Backoff: fixed(time.Millisecond)})
	f.in <- &fmsg{id: "a", payload: "p", attempt: 4, last: true}
	e.deadLettered(t, broker.ReasonMaxDeliver, 4, 1)
}

// At shutdown what was received but not started (a Drainer's buffer) is
// given back with Return, and the delivery in flight is finished and
// acked.
func TestEngineShutdownReturnsUnstarted(t *testing.T) {
	f := newFake()
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e := newEngine(t, f, nil, idem.Options{}, func(ctx context.Context, _ *fmsg) ([]byte, error) {
		once.Do(func() { close(started) })
		select {
		case <-release:
		case <-ctx.Done(): // the test failed: ShutdownTimeout ends it
		}
		return nil, nil
	}, broker.Options[*fmsg]{Concurrency: 1, ShutdownTimeout: 20 * time.Second})
	for _, id := range []string{"a", "b", "c"} {
		f.in <- &fmsg{id: id, payload: "p"}
	}
	waitFor(t, "the first handler started", func() bool {
		select {
		case <-started:
			return true
		default:
			return false
		}
	})
	e.cancel()
	returned := f.nextOf(t, 2, "return", "return before the handler in flight finished")
	if !returned["b"] || !returned["c"] {
		t.Fatalf("returned %v, want b and c", returned)
	}
	close(release)
	if c := f.next(t); c.op != "ack" || c.id != "a" {
		t.Fatalf("%s %s, want the in-flight a acked", c.op, c.id)
	}
	e.stop(t)
}

// At shutdown a delivery held in progress elsewhere is handed back with
// the delay until the holder's lease ends, at once.
func TestEngineShutdownHandsBackHeld(t *testing.T) {
	f := newFake()
	e := newEngine(t, f, nil, idem.Options{Lease: 30 * time.Second}, nil, broker.Options[*fmsg]{Backoff: fixed(10 * time.Millisecond)})
	m := &fmsg{id: "a", payload: "p"}
	holdElsewhere(t, e.g, m)
	f.in <- m
	waitFor(t, "held", func() bool { return e.seen.get(idem.OutcomeInProgress) >= 2 })
	e.stop(t)
	c := f.next(t)
	if c.op != "retry" || c.delay < 20*time.Second {
		t.Fatalf("%s delay %v, want retry until the holder's lease ends", c.op, c.delay)
	}
	if n := e.runs.Load(); n != 0 {
		t.Fatalf("handler ran %d times", n)
	}
}

// At shutdown the broker's last allowed delivery is not handed back: it
// is held on until ShutdownTimeout, then dead-lettered with idem's headers.
func TestEngineShutdownHoldsLastThenDeadLetters(t *testing.T) {
	f := newFake()
	const shutdown = 300 * time.Millisecond
	e := newEngine(t, f, nil, idem.Options{Lease: 30 * time.Second}, nil, broker.Options[*fmsg]{Backoff: fixed(10 * time.Millisecond), ShutdownTimeout: shutdown})
	m := &fmsg{id: "a", payload: "p", attempt: 3, last: true}
	holdElsewhere(t, e.g, m)
	f.in <- m
	waitFor(t, "held", func() bool { return e.seen.get(idem.OutcomeInProgress) >= 2 })
	f.none(t, "last delivery held")
	stopped := time.Now()
	e.cancel()
	c := e.deadLettered(t, broker.ReasonMaxDeliver, 3, 0)
	if held := c.at.Sub(stopped); held < shutdown {
		t.Fatalf("dead-lettered %v after the stop, before ShutdownTimeout %v", held, shutdown)
	}
	e.stop(t)
}

// A transport whose Retry cannot delay sees Retry(0) once the engine has
// waited the delay out, the delivery kept alive meanwhile.
func TestEngineWaitsOutDelayForTransportWithout(t *testing.T) {
	f := newFake()
	f.noDelay, f.redeliver, f.countRetry = true, true, true
	f.kaEvery = 10 * time.Millisecond
	const backoff = 400 * time.Millisecond
	var failedAt atomic.Int64
	var kasAtFailure atomic.Int64
	e := newEngine(t, f, nil, idem.Options{}, func(_ context.Context, m *fmsg) ([]byte, error) {
		if m.attempt <= 1 {
			kasAtFailure.Store(f.keepAlives.Load())
			failedAt.Store(time.Now().UnixNano())
			return nil, errTransient
		}
		return nil, nil
	}, broker.Options[*fmsg]{Backoff: fixed(backoff)})
	f.in <- &fmsg{id: "a", payload: "p", attempt: 1}
	c := f.next(t)
	if c.op != "retry" || c.delay != 0 {
		t.Fatalf("%s delay %v, want retry with no delay", c.op, c.delay)
	}
	if waited := c.at.Sub(time.Unix(0, failedAt.Load())); waited < backoff {
		t.Fatalf("Retry(0) %v after the failure, before the back-off %v", waited, backoff)
	}
	if c.kas <= kasAtFailure.Load() {
		t.Fatalf("no keep-alive while the engine waited the delay out")
	}
	if c := f.next(t); c.op != "ack" {
		t.Fatalf("%s after the redelivery, want ack", c.op)
	}
	if n := e.runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times", n)
	}
}

// ErrLockLost from KeepAlive cancels the handler's context with it, and
// the delivery is not settled: the broker has taken it back.
func TestEngineLockLostCancelsHandler(t *testing.T) {
	f := newFake()
	f.kaEvery = 10 * time.Millisecond
	f.kaErr = fmt.Errorf("servicebus: %w", broker.ErrLockLost)
	causes := make(chan error, 1)
	e := newEngine(t, f, nil, idem.Options{}, func(ctx context.Context, _ *fmsg) ([]byte, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	}, broker.Options[*fmsg]{})
	f.in <- &fmsg{id: "a", payload: "p"}
	r := e.report(t)
	if !errors.Is(r.BrokerErr, broker.ErrLockLost) {
		t.Fatalf("report %+v, want BrokerErr ErrLockLost", r)
	}
	if cause := <-causes; !errors.Is(cause, broker.ErrLockLost) {
		t.Fatalf("handler's context ended with %v, want ErrLockLost", cause)
	}
	f.none(t, "lock lost")
}

// A dead letter the destination does not take is retried after the
// back-off, and the failure reported.
func TestEngineDeadLetterFailureRetried(t *testing.T) {
	f := newFake()
	f.dlFail.Store(1)
	const backoff = 77 * time.Millisecond
	e := newEngine(t, f, nil, idem.Options{}, func(context.Context, *fmsg) ([]byte, error) {
		return nil, idem.Permanent(errors.New("card rejected"))
	}, broker.Options[*fmsg]{Backoff: fixed(backoff)})
	f.in <- &fmsg{id: "a", payload: "p", attempt: 1}
	if c := f.next(t); c.op != "dead_letter_failed" {
		t.Fatalf("%s, want a dead letter attempt", c.op)
	}
	if c := f.next(t); c.op != "retry" || c.delay != backoff {
		t.Fatalf("%s delay %v, want retry after the back-off %v", c.op, c.delay, backoff)
	}
	select {
	case err := <-e.errs:
		if !errors.Is(err, errDLDown) {
			t.Fatalf("OnError %v, want the dead-letter failure", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the dead-letter failure was not reported")
	}
	if r := e.report(t); !errors.Is(r.BrokerErr, errDLDown) || r.Action != idem.ActionDeadLetter {
		t.Fatalf("report %+v", r)
	}
}

// One clock for a slow two-phase handler: the guard's heartbeat (Lease/3)
// renews the message with the record's lease, long before the transport's
// own period (an hour here) would, and a lock it finds lost cancels the
// handler with ErrLockLost, nothing settled.
func TestEngineHeartbeatRenewsTheLock(t *testing.T) {
	f := newFake()
	f.kaEvery = time.Hour
	e := newEngine(t, f, nil, idem.Options{Lease: 300 * time.Millisecond}, func(ctx context.Context, m *fmsg) ([]byte, error) {
		for f.keepAlives.Load() < 3 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		return nil, nil
	}, broker.Options[*fmsg]{})
	f.in <- &fmsg{id: "slow", payload: "p"}
	if c := f.next(t); c.op != "ack" || c.kas < 3 {
		t.Fatalf("%s after %d keep-alives, want ack after 3 from the lease's heartbeat", c.op, c.kas)
	}
	if r := e.report(t); r.Action != idem.ActionAck {
		t.Fatalf("report %+v", r)
	}

	f = newFake() // a consumer of its own
	f.kaEvery = time.Hour
	f.kaErr = fmt.Errorf("servicebus: %w", broker.ErrLockLost)
	causes := make(chan error, 1)
	e = newEngine(t, f, nil, idem.Options{Lease: 300 * time.Millisecond}, func(ctx context.Context, _ *fmsg) ([]byte, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	}, broker.Options[*fmsg]{})
	f.in <- &fmsg{id: "lost", payload: "p"}
	select {
	case cause := <-causes:
		if !errors.Is(cause, broker.ErrLockLost) {
			t.Fatalf("handler's context ended with %v, want ErrLockLost", cause)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the heartbeat's lost lock did not cancel the handler")
	}
	if r := e.report(t); !errors.Is(r.BrokerErr, broker.ErrLockLost) {
		t.Fatalf("report %+v, want BrokerErr ErrLockLost", r)
	}
	f.none(t, "lock lost")
}

// A retry the transport cannot delay is waited out by the engine until the
// delivery's context ends, even without a stop channel (ProcessUntil with
// nil stop, as Watermill's middleware calls it): the report gives the delay
// really waited, and the retry is handed to the transport at once.
func TestEngineWaitOutEndsWithTheDelivery(t *testing.T) {
	f := newFake()
	f.noDelay = true
	g, err := idem.New(memory.New(), idem.Options{Scope: "waitout"})
	if err != nil {
		t.Fatal(err)
	}
	h := broker.Handle(func(context.Context, *fmsg) ([]byte, error) { return nil, errors.New("transient") })
	p, err := broker.NewProcessor[*fmsg](f, g, h, broker.Options[*fmsg]{Backoff: fixed(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	r := p.ProcessUntil(ctx, nil, &fmsg{id: "w", payload: "p", attempt: 1})
	if r.Action != idem.ActionRetry || r.Delay >= time.Hour || r.Delay <= 0 {
		t.Fatalf("report %+v: want a retry whose delay is the wait until the delivery's context ended", r)
	}
	if c := f.next(t); c.op != "retry" || c.delay != 0 {
		t.Fatalf("%s delay %v, want Retry with no delay (the engine waited)", c.op, c.delay)
	}
}
