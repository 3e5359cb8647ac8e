package brokertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/store/memory"
)

// settleTimeout bounds how long a case waits for the broker to settle what
// it published. It is a deadline for a hung adapter, not a measurement.
const settleTimeout = 90 * time.Second

var scopes atomic.Int64

// newGuard returns a guard on a fresh in-memory store with its own scope.
func newGuard(t *testing.T, store idem.Store, opts idem.Options) *idem.Guard {
	t.Helper()
	if store == nil {
		store = memory.New()
	}
	opts.Scope = fmt.Sprintf("brokertest-%d", scopes.Add(1))
	g, err := idem.New(store, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// effects counts the handler's effects per message id, with the payloads.
type effects struct {
	mu       sync.Mutex
	n        map[string]int
	payloads map[string][]byte
	calls    atomic.Int64
}

func newEffects() *effects {
	return &effects{n: map[string]int{}, payloads: map[string][]byte{}}
}

func (e *effects) apply(m idem.Message) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n[m.ID]++
	e.payloads[m.ID] = bytes.Clone(m.Payload)
}

func (e *effects) count(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[id]
}

func (e *effects) distinct() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.n)
}

// outcomes counts Reports by outcome and action, from AfterSettle.
type outcomes struct {
	mu      sync.Mutex
	outcome map[idem.Outcome]int
	action  map[idem.Action]int
	reasons map[string]int
}

func newOutcomes() *outcomes {
	return &outcomes{outcome: map[idem.Outcome]int{}, action: map[idem.Action]int{}, reasons: map[string]int{}}
}

func (o *outcomes) hook(_ context.Context, _ idem.Message, r broker.Report) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.outcome[r.Result.Outcome]++
	o.action[r.Action]++
	if r.Reason != "" {
		o.reasons[r.Reason]++
	}
}

func (o *outcomes) get(out idem.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.outcome[out]
}

func (o *outcomes) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Sprintf("outcomes %v, actions %v, reasons %v", o.outcome, o.action, o.reasons)
}

func start(t *testing.T, b Broker, c Consumer) Running {
	t.Helper()
	r, err := b.Start(context.Background(), c)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			r.Kill()
		}
	})
	return &tracked{Running: r, stopped: &stopped}
}

type tracked struct {
	Running
	stopped *bool
}

func (r *tracked) Stop() error { *r.stopped = true; return r.Running.Stop() }
func (r *tracked) Kill()       { *r.stopped = true; r.Running.Kill() }

func publish(t *testing.T, b Broker, msgs ...Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if err := b.Publish(ctx, msgs...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

// waitFor polls cond until it holds or settleTimeout passes.
func waitFor(t *testing.T, what string, cond func() bool, state func() string) {
	t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v (%s)", what, settleTimeout, state())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func deadLetters(t *testing.T, b Broker) []DeadLetter {
	t.Helper()
	dls, err := b.DeadLetters(context.Background())
	if err != nil {
		t.Fatalf("DeadLetters: %v", err)
	}
	return dls
}

func waitDeadLetters(t *testing.T, b Broker, n int) []DeadLetter {
	t.Helper()
	var dls []DeadLetter
	waitFor(t, fmt.Sprintf("%d dead letters", n), func() bool {
		dls = deadLetters(t, b)
		return len(dls) >= n
	}, func() string { return fmt.Sprintf("%d dead letters", len(dls)) })
	return dls
}

// workload is the at-least-once stream of the effectively-once cases:
// unique orders, producer retries of some (same id, same content) and
// reuses of some ids with other content, shuffled deterministically.
func workload(unique, retries, reuses int) []Message {
	var msgs []Message
	for i := range unique {
		msgs = append(msgs, Message{ID: fmt.Sprintf("order-%04d", i), Payload: []byte(fmt.Sprintf(`{"order":%d,"amount":%d}`, i, 10+i%90))})
	}
	// Retries take even orders, reuses odd ones, so that no id is both
	// (a reuse that wins the race would make its original and the
	// original's retry two conflicts).
	for i := range retries {
		msgs = append(msgs, msgs[(2*i)%unique])
	}
	for i := range reuses {
		m := msgs[(14*i+1)%unique]
		msgs = append(msgs, Message{ID: m.ID, Payload: []byte(fmt.Sprintf(`{"order":"reused","n":%d}`, i))})
	}
	// A fixed permutation: retries and reuses interleave with originals.
	out := make([]Message, len(msgs))
	step := 7919 // a prime that does not divide len(msgs) in the cases here
	for i := range msgs {
		out[i] = msgs[(i*step)%len(msgs)]
	}
	return out
}

// testEffectivelyOnce: thousands of messages with producer retries and id
// reuses, three competing consumers: the effects equal the unique
// messages, every reuse is dead-lettered as a conflict.
func testEffectivelyOnce(t *testing.T, b Broker) {
	const unique, retries, reuses = 1500, 400, 40
	msgs := workload(unique, retries, reuses)
	// A short lease: a retry racing its original waits for the holder's
	// lease, which should not make the case slow.
	g := newGuard(t, nil, idem.Options{Lease: 2 * time.Second})
	eff, out := newEffects(), newOutcomes()
	c := Consumer{
		Guard:  g,
		Handle: func(ctx context.Context, m idem.Message) ([]byte, error) { eff.apply(m); return nil, nil },
		Hooks:  broker.Hooks[idem.Message]{AfterSettle: out.hook},
	}
	for range 3 {
		start(t, b, c)
	}
	publish(t, b, msgs...)
	waitFor(t, "every unique order applied and every reuse dead-lettered", func() bool {
		return eff.distinct() == unique && len(deadLetters(t, b)) >= reuses
	}, func() string { return fmt.Sprintf("%d applied; %s", eff.distinct(), out) })
	checkOnce(t, eff, unique)
	dls := deadLetters(t, b)
	if len(dls) != reuses {
		t.Fatalf("%d dead letters, want %d (one per reused id)", len(dls), reuses)
	}
	for _, d := range dls {
		if d.Reason() != "conflict" {
			t.Fatalf("dead letter %q with reason %q, want conflict", d.ID, d.Reason())
		}
	}
}

func checkOnce(t *testing.T, eff *effects, unique int) {
	t.Helper()
	eff.mu.Lock()
	defer eff.mu.Unlock()
	if len(eff.n) != unique {
		t.Fatalf("%d ids applied, want %d", len(eff.n), unique)
	}
	for id, n := range eff.n {
		if n != 1 {
			t.Fatalf("%s applied %d times", id, n)
		}
	}
}

// testEffectivelyOnceTx: the same stream through the transactional inbox
// on SQLite: one effect row per unique order, written in the marker's
// transaction.
func testEffectivelyOnceTx(t *testing.T, b Broker) {
	const unique, retries, reuses = 600, 150, 20
	in := newInbox(t)
	g := newGuard(t, in.store, idem.Options{Lease: 2 * time.Second})
	out := newOutcomes()
	c := Consumer{
		Guard:    g,
		HandleTx: in.apply,
		Hooks:    broker.Hooks[idem.Message]{AfterSettle: out.hook},
	}
	for range 2 {
		start(t, b, c)
	}
	publish(t, b, workload(unique, retries, reuses)...)
	count := func(q string) int { return in.count(t, q) }
	waitFor(t, "every unique order committed and every reuse dead-lettered", func() bool {
		return count(`SELECT COUNT(DISTINCT id) FROM effects`) == unique && len(deadLetters(t, b)) >= reuses
	}, func() string { return fmt.Sprintf("%d committed; %s", count(`SELECT COUNT(*) FROM effects`), out) })
	if n := count(`SELECT COUNT(*) FROM effects`); n != unique {
		t.Fatalf("%d effect rows for %d unique orders", n, unique)
	}
	if n := len(deadLetters(t, b)); n != reuses {
		t.Fatalf("%d dead letters, want %d", n, reuses)
	}
}

// testCrashBeforeSettle: a consumer dies after the record is durable and
// before the broker heard of it (a lost ack, a connection closed, a restart
// without commit): the message comes back to another consumer, which finds
// it done and acks it without running the handler again.
func testCrashBeforeSettle(t *testing.T, b Broker) {
	const n = 30
	g := newGuard(t, nil, idem.Options{})
	eff, out := newEffects(), newOutcomes()
	var (
		victim  Running
		ready   = make(chan struct{})
		crashed atomic.Bool
		kills   = make(chan struct{}, 1)
	)
	c := Consumer{
		Guard:       g,
		Concurrency: 1,
		Handle:      func(ctx context.Context, m idem.Message) ([]byte, error) { eff.apply(m); return nil, nil },
		Hooks: broker.Hooks[idem.Message]{
			BeforeSettle: func(ctx context.Context, m idem.Message, r broker.Report) {
				if r.Result.Outcome == idem.OutcomeProcessed && m.ID == "crash-0007" && crashed.CompareAndSwap(false, true) {
					<-ready
					kills <- struct{}{}
					victim.Kill() // the ack never leaves
				}
			},
			AfterSettle: out.hook,
		},
	}
	var msgs []Message
	for i := range n {
		msgs = append(msgs, Message{ID: fmt.Sprintf("crash-%04d", i), Payload: []byte(fmt.Sprintf("p%d", i)), OrderKey: "k"})
	}
	victim = start(t, b, c)
	close(ready)
	publish(t, b, msgs...)
	waitFor(t, "the consumer crashed before settling", func() bool { return len(kills) == 1 }, out.String)
	// The survivor takes over.
	survivor := c
	survivor.Hooks.BeforeSettle = nil
	start(t, b, survivor)
	waitFor(t, "every message applied", func() bool { return eff.distinct() == n }, out.String)
	checkOnce(t, eff, n)
	waitFor(t, "the crashed delivery redelivered and acked as a duplicate", func() bool {
		return out.get(idem.OutcomeDuplicate) >= 1
	}, out.String)
	if dls := deadLetters(t, b); len(dls) != 0 {
		t.Fatalf("%d dead letters after a crash, want none", len(dls))
	}
}

// testGracefulStop: a graceful stop mid-stream leaves no claim held and
// nothing processed unacked: the next consumer applies the rest and sees
// no duplicate (nothing it is handed was done before).
func testGracefulStop(t *testing.T, b Broker) {
	const n = 60
	store := memory.New()
	g := newGuard(t, store, idem.Options{})
	eff, out := newEffects(), newOutcomes()
	half := make(chan struct{})
	var once sync.Once
	c := Consumer{
		Guard: g,
		Handle: func(ctx context.Context, m idem.Message) ([]byte, error) {
			eff.apply(m)
			if eff.distinct() >= n/3 {
				once.Do(func() { close(half) })
			}
			time.Sleep(2 * time.Millisecond) // work that takes time, so some is in flight at the stop
			return nil, nil
		},
		Hooks: broker.Hooks[idem.Message]{AfterSettle: out.hook},
	}
	var msgs []Message
	for i := range n {
		msgs = append(msgs, Message{ID: fmt.Sprintf("stop-%04d", i), Payload: []byte("x")})
	}
	first := start(t, b, c)
	publish(t, b, msgs...)
	<-half
	if err := first.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	recs, err := store.List(context.Background(), idem.ListFilter{State: idem.StateInProgress})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 0 {
		t.Fatalf("after a graceful stop, %d claims are still held (first: %+v)", len(recs), recs[0])
	}
	second := newOutcomes()
	c.Hooks.AfterSettle = second.hook
	start(t, b, c)
	waitFor(t, "every message applied", func() bool { return eff.distinct() == n }, second.String)
	checkOnce(t, eff, n)
	if d := second.get(idem.OutcomeDuplicate); d != 0 {
		t.Fatalf("the consumer after a graceful stop was handed %d messages already applied (%s)", d, second)
	}
}

// testTransient: a handler failing transiently is retried until it
// succeeds, and applied once.
func testTransient(t *testing.T, b Broker) {
	g := newGuard(t, nil, idem.Options{})
	eff, out := newEffects(), newOutcomes()
	var tries sync.Map
	c := Consumer{
		Guard:        g,
		RetryBackoff: 20 * time.Millisecond,
		Handle: func(ctx context.Context, m idem.Message) ([]byte, error) {
			v, _ := tries.LoadOrStore(m.ID, new(atomic.Int32))
			if v.(*atomic.Int32).Add(1) <= 2 {
				return nil, errors.New("downstream briefly unavailable")
			}
			eff.apply(m)
			return nil, nil
		},
		Hooks: broker.Hooks[idem.Message]{AfterSettle: out.hook},
	}
	start(t, b, c)
	publish(t, b, Message{ID: "flaky-1", Payload: []byte("a")}, Message{ID: "flaky-2", Payload: []byte("b")})
	waitFor(t, "both applied after their failures", func() bool { return eff.distinct() == 2 }, out.String)
	checkOnce(t, eff, 2)
	if f := out.get(idem.OutcomeFailed); f < 4 {
		t.Fatalf("%d failed attempts reported, want 4 (%s)", f, out)
	}
	if dls := deadLetters(t, b); len(dls) != 0 {
		t.Fatalf("transient failures dead-lettered: %d", len(dls))
	}
}

// testPermanent: a permanent failure is dead-lettered (reason permanent)
// after one run, never retried.
func testPermanent(t *testing.T, b Broker) {
	g := newGuard(t, nil, idem.Options{})
	eff, out := newEffects(), newOutcomes()
	var calls atomic.Int32
	c := Consumer{
		Guard: g,
		Handle: func(ctx context.Context, m idem.Message) ([]byte, error) {
			if m.ID == "bad" {
				calls.Add(1)
				return nil, idem.Permanent(errors.New("card rejected"))
			}
			eff.apply(m)
			return nil, nil
		},
		Hooks: broker.Hooks[idem.Message]{AfterSettle: out.hook},
	}
	start(t, b, c)
	publish(t, b, Message{ID: "bad", Payload: []byte("x")}, Message{ID: "good", Payload: []byte("y")})
	dls := waitDeadLetters(t, b, 1)
	waitFor(t, "the good message applied", func() bool { return eff.count("good") == 1 }, out.String)
	if dls[0].Reason() != "permanent" || dls[0].ID != "bad" || string(dls[0].Payload) != "x" {
		t.Fatalf("dead letter %+v, want id bad, reason permanent, the payload kept", dls[0])
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("permanent failure ran %d times, want 1", n)
	}
}

// testPoison: a message without a key is dead-lettered on its first
// delivery (reason no_key) and never reaches the handler; so is one whose
// content cannot be decoded into a key.
func testPoison(t *testing.T, b Broker) {
	g := newGuard(t, nil, idem.Options{Key: idem.FirstOf(idem.MessageID, idem.JSONFieldsKey("order_id"))})
	var calls atomic.Int32
	out := newOutcomes()
	c := Consumer{
		Guard:  g,
		Handle: func(context.Context, idem.Message) ([]byte, error) { calls.Add(1); return nil, nil },
		Hooks:  broker.Hooks[idem.Message]{AfterSettle: out.hook},
	}
	start(t, b, c)
	publish(t, b, Message{Payload: []byte("not json at all")}, Message{Payload: []byte(`{"order_id": "ok-1"}`)})
	dls := waitDeadLetters(t, b, 1)
	waitFor(t, "the keyed message handled", func() bool { return calls.Load() == 1 }, out.String)
	if r := dls[0].Reason(); r != "no_key" && r != "invalid_key" {
		t.Fatalf("poison dead letter reason %q, want no_key or invalid_key", r)
	}
	if string(dls[0].Payload) != "not json at all" {
		t.Fatalf("poison payload %q", dls[0].Payload)
	}
	// The dead letter is durable at the broker before the engine reports
	// its settle (AfterSettle runs after the produce): wait for the report.
	waitFor(t, "the poison's settle reported", func() bool { return out.get(idem.OutcomeNoKey) >= 1 }, out.String)
	if n := out.get(idem.OutcomeNoKey); n != 1 {
		t.Fatalf("poison delivered %d times, want once (%s)", n, out)
	}
}

// testConflictHeaders: a dead-lettered conflict carries what an operator
// needs to decide from the headers alone.
func testConflictHeaders(t *testing.T, b Broker) {
	g := newGuard(t, nil, idem.Options{})
	eff := newEffects()
	c := Consumer{
		Guard:  g,
		Handle: func(ctx context.Context, m idem.Message) ([]byte, error) { eff.apply(m); return nil, nil },
	}
	start(t, b, c)
	orig := Message{ID: "order-42", Payload: []byte(`{"amount":10}`), Headers: map[string]string{"x-tenant": "acme"}}
	publish(t, b, orig)
	waitFor(t, "the original applied", func() bool { return eff.count("order-42") == 1 }, func() string { return "" })
	reuse := Message{ID: "order-42", Payload: []byte(`{"amount":99}`), Headers: map[string]string{"x-tenant": "acme"}}
	publish(t, b, reuse)
	d := waitDeadLetters(t, b, 1)[0]
	fpOrig, _ := g.Fingerprint(idem.Message{ID: orig.ID, Payload: orig.Payload})
	fpReuse, _ := g.Fingerprint(idem.Message{ID: reuse.ID, Payload: reuse.Payload})
	checks := map[string]string{
		idem.HeaderReason:            "conflict",
		idem.HeaderStoredFingerprint: fpOrig,
		idem.HeaderFingerprint:       fpReuse,
		idem.HeaderStoredState:       string(idem.StateCompleted),
		"x-tenant":                   "acme",
	}
	for name, want := range checks {
		if got := d.Header(name); got != want {
			t.Errorf("dead letter header %s = %q, want %q (all: %v)", name, got, want, d.Headers)
		}
	}
	if d.Header(idem.HeaderStoredCreatedAt) == "" {
		t.Errorf("no %s header: %v", idem.HeaderStoredCreatedAt, d.Headers)
	}
	if d.ID != "order-42" || string(d.Payload) != string(reuse.Payload) {
		t.Errorf("dead letter id %q payload %q, want the reuse as sent", d.ID, d.Payload)
	}
	if !hasPosition(d) {
		t.Errorf("dead letter carries no broker position (sequence / offset) header: %v", d.Headers)
	}
}

// hasPosition reports whether the dead letter names where the original sat
// at the broker.
func hasPosition(d DeadLetter) bool {
	for name := range d.Headers {
		n := strings.ToLower(name)
		if strings.Contains(n, "seq") || strings.Contains(n, "offset") || strings.Contains(n, "delivery-tag") || strings.Contains(n, "position") {
			return true
		}
	}
	return false
}

// testInProgressWaits: a producer retry that arrives while the first copy's
// handler runs (longer than the adapter's back-off would wait, several
// times over) waits for the holder's lease instead of spending deliveries:
// it ends as a duplicate, never dead-lettered as max_deliver.
func testInProgressWaits(t *testing.T, b Broker) {
	// A lease long enough that its renewals (every third of it) land on a
	// machine whose CPUs the race detector and parallel packages saturate.
	const lease = 1500 * time.Millisecond
	g := newGuard(t, nil, idem.Options{Lease: lease})
	out := newOutcomes()
	eff := newEffects()
	release := make(chan struct{})
	var seenBusy atomic.Int32
	c := Consumer{
		Guard:         g,
		Concurrency:   2,
		MaxDeliveries: 3,
		RetryBackoff:  10 * time.Millisecond,
		Handle: func(ctx context.Context, m idem.Message) ([]byte, error) {
			eff.apply(m)
			<-release
			return []byte("done"), nil
		},
		Hooks: broker.Hooks[idem.Message]{
			AfterSettle: func(ctx context.Context, m idem.Message, r broker.Report) {
				if r.Result.Outcome == idem.OutcomeInProgress {
					seenBusy.Add(1)
				}
				out.hook(ctx, m, r)
			},
		},
	}
	start(t, b, c)
	start(t, b, c)
	m := Message{ID: "long-1", Payload: []byte("x")}
	publish(t, b, m)
	waitFor(t, "the first copy running", func() bool { return eff.count("long-1") == 1 }, out.String)
	publish(t, b, m) // the producer's retry
	// Hold the first copy for several leases (each renewed): a back-off of
	// 10ms would have spent three deliveries many times over.
	time.Sleep(3 * lease)
	close(release)
	waitFor(t, "the retry acked as a duplicate", func() bool { return out.get(idem.OutcomeDuplicate) >= 1 }, out.String)
	if dls := deadLetters(t, b); len(dls) != 0 {
		t.Fatalf("a live duplicate was dead-lettered (%q): %s", dls[0].Reason(), out)
	}
	if n := eff.count("long-1"); n != 1 {
		t.Fatalf("applied %d times", n)
	}
}

// testOrphanedClaim: a claim whose owner crashed before its reply arrived
// (a record in progress, nobody working on it) holds the message only until
// its lease ends; then the message is retaken and applied, not
// dead-lettered.
func testOrphanedClaim(t *testing.T, b Broker) {
	store := memory.New()
	// Retaken because the user chose it: the default parks (testStaleParkedByDefault).
	g := newGuard(t, store, idem.Options{Lease: 1500 * time.Millisecond, Stale: idem.StaleRetake})
	eff, out := newEffects(), newOutcomes()
	m := Message{ID: "orphan-1", Payload: []byte("x")}
	k := idem.Key{Scope: g.Options().Scope, ID: m.ID}
	fp, _ := g.Fingerprint(idem.Message{ID: m.ID, Payload: m.Payload})
	now := time.Now()
	if _, err := store.Claim(context.Background(), idem.ClaimRequest{
		Key: k, Fingerprint: fp, Now: now, LeaseUntil: now.Add(1500 * time.Millisecond), ExpiresAt: now.Add(time.Hour), TakeOverStale: true,
	}); err != nil {
		t.Fatal(err)
	}
	c := Consumer{
		Guard:         g,
		MaxDeliveries: 2,
		RetryBackoff:  10 * time.Millisecond,
		Handle:        func(ctx context.Context, m idem.Message) ([]byte, error) { eff.apply(m); return nil, nil },
		Hooks:         broker.Hooks[idem.Message]{AfterSettle: out.hook},
	}
	start(t, b, c)
	publish(t, b, m)
	waitFor(t, "the orphaned claim retaken and applied", func() bool { return eff.count("orphan-1") == 1 }, out.String)
	if dls := deadLetters(t, b); len(dls) != 0 {
		t.Fatalf("orphaned claim dead-lettered (%q) instead of retaken: %s", dls[0].Reason(), out)
	}
}

// testStaleParkedByDefault: the pattern's rule is the default. A claim
// orphaned by a consumer that crashed between its side effect and
// Complete may have done its effect, so under default options (no
// Reconcile) the redelivery never runs the handler again: it is
// dead-lettered as parked, the record left in progress for an operator
// (idem resolve), and nothing is applied twice.
func testStaleParkedByDefault(t *testing.T, b Broker) {
	store := memory.New()
	g := newGuard(t, store, idem.Options{Lease: 500 * time.Millisecond})
	eff, out := newEffects(), newOutcomes()
	m := Message{ID: "crashed-1", Payload: []byte("x")}
	k := idem.Key{Scope: g.Options().Scope, ID: m.ID}
	fp, _ := g.Fingerprint(idem.Message{ID: m.ID, Payload: m.Payload})
	now := time.Now()
	orphan, err := store.Claim(context.Background(), idem.ClaimRequest{
		Key: k, Fingerprint: fp, Now: now, LeaseUntil: now.Add(500 * time.Millisecond), ExpiresAt: now.Add(time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	c := Consumer{
		Guard:        g,
		RetryBackoff: 10 * time.Millisecond,
		Handle:       func(ctx context.Context, m idem.Message) ([]byte, error) { eff.apply(m); return nil, nil },
		Hooks:        broker.Hooks[idem.Message]{AfterSettle: out.hook},
	}
	start(t, b, c)
	publish(t, b, m)
	d := waitDeadLetters(t, b, 1)[0]
	if d.Reason() != "parked" || d.ID != m.ID {
		t.Fatalf("dead letter %q reason %q, want %s parked (%s)", d.ID, d.Reason(), m.ID, out)
	}
	if n := eff.count(m.ID); n != 0 {
		t.Fatalf("the handler ran %d times over a crashed owner's claim under the default policy", n)
	}
	r, err := store.Get(context.Background(), k)
	if err != nil || r.State != idem.StateInProgress || r.Token != orphan.Record.Token {
		t.Fatalf("record after parking: %+v %v; want the crashed owner's, in progress, for an operator", r, err)
	}
	if got := d.Header(idem.HeaderStoredState); got != string(idem.StateInProgress) {
		t.Errorf("parked dead letter's %s = %q, want in_progress", idem.HeaderStoredState, got)
	}
}

// testOrder: messages sharing an OrderKey are applied in publish order,
// even when one of them fails transiently and is retried.
func testOrder(t *testing.T, b Broker) {
	const n = 100
	g := newGuard(t, nil, idem.Options{})
	var (
		mu    sync.Mutex
		order []string
		fails atomic.Int32
	)
	c := Consumer{
		Guard:        g,
		RetryBackoff: 10 * time.Millisecond,
		Handle: func(ctx context.Context, m idem.Message) ([]byte, error) {
			if m.ID == "seq-0040" && fails.Add(1) <= 2 {
				return nil, errors.New("transient")
			}
			mu.Lock()
			order = append(order, m.ID)
			mu.Unlock()
			return nil, nil
		},
	}
	start(t, b, c)
	var msgs []Message
	for i := range n {
		msgs = append(msgs, Message{ID: fmt.Sprintf("seq-%04d", i), Payload: []byte("x"), OrderKey: "one-key"})
	}
	publish(t, b, msgs...)
	waitFor(t, "all applied", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == n }, func() string { return "" })
	mu.Lock()
	defer mu.Unlock()
	for i, id := range order {
		if want := fmt.Sprintf("seq-%04d", i); id != want {
			t.Fatalf("position %d applied %s, want %s (order broken)", i, id, want)
		}
	}
}

// testDeliveryLimit: a message whose handler always fails transiently is
// tried up to the delivery limit and then dead-lettered by the adapter with
// broker.ReasonMaxDeliver and idem's headers — never dropped by the broker,
// never retried forever — while a healthy neighbour is applied.
func testDeliveryLimit(t *testing.T, b Broker) {
	const limit = 3
	g := newGuard(t, nil, idem.Options{})
	eff, out := newEffects(), newOutcomes()
	var tries atomic.Int32
	c := Consumer{
		Guard:         g,
		MaxDeliveries: limit,
		RetryBackoff:  10 * time.Millisecond,
		Handle: func(ctx context.Context, m idem.Message) ([]byte, error) {
			if m.ID == "always-failing" {
				tries.Add(1)
				return nil, errors.New("downstream down")
			}
			eff.apply(m)
			return nil, nil
		},
		Hooks: broker.Hooks[idem.Message]{AfterSettle: out.hook},
	}
	start(t, b, c)
	publish(t, b, Message{ID: "always-failing", Payload: []byte("x")}, Message{ID: "healthy", Payload: []byte("y")})
	d := waitDeadLetters(t, b, 1)[0]
	waitFor(t, "the healthy message applied", func() bool { return eff.count("healthy") == 1 }, out.String)
	if d.Reason() != broker.ReasonMaxDeliver || d.ID != "always-failing" {
		t.Fatalf("dead letter %q with reason %q, want always-failing with %q (%v)", d.ID, d.Reason(), broker.ReasonMaxDeliver, d.Headers)
	}
	if n := tries.Load(); n != limit {
		t.Fatalf("the failing handler ran %d times, want the limit %d", n, limit)
	}
}
