package outboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/store/memory"
)

// Broker is one broker for RunRelay: a Publisher, and the consumer's view
// of what reaches the destination.
type Broker struct {
	// Publisher publishes the scenarios' records; they are all addressed to
	// Destination.
	Publisher outbox.Publisher
	// Destination is the topic, subject or exchange whose messages Receive
	// returns, fresh for each scenario.
	Destination string
	// Receive returns the next message delivered to a consumer of
	// Destination, in delivery order, as the broker adapter's MessageOf
	// builds it (kafka.MessageOf, natsidem.MessageOf, amqpidem.MessageOf),
	// or ctx's error.
	Receive func(ctx context.Context) (idem.Message, error)
	// Dedups says the broker may drop a repeat of the same id and content
	// itself (JetStream's duplicate window): the scenarios that publish a
	// message twice then accept one delivery as well as two.
	Dedups bool
	// Rejected, if set, is a message the broker refuses (too large for the
	// destination): the relay must park it.
	Rejected *outbox.Message
	// Schedules says the publisher sends a message with NotBefore as a
	// scheduled message (Service Bus); otherwise it must refuse it, and
	// the relay park it.
	Schedules bool
}

// NewBroker returns a broker for one scenario and registers its cleanup.
type NewBroker func(t *testing.T) Broker

// RunRelay runs the relay's end-to-end scenarios over a store from
// newSubject (on the wall clock) and a broker from newBroker, with the
// consumer's side an idem guard keyed by the default key (idem.MessageID)
// over the adapter's MessageOf: the relay killed between the broker's
// confirmation and its mark (the message goes out twice, the consumer's
// records remove the second), the lease holder killed (another relay takes
// over within the lease), a rolled back transaction (nothing published), a
// failing message holding back its key while other keys flow, and a
// rejected message parked.
func RunRelay(t *testing.T, newSubject NewSubject, newBroker NewBroker) {
	tests := []struct {
		name string
		fn   func(r *relayEnv)
	}{
		{"StableIDsReachTheConsumer", testStableIDs},
		{"KilledBetweenPublishAndMark", testKilledBeforeMark},
		{"LeaderKilledTakenOver", testLeaderKilled},
		{"RollbackPublishesNothing", testRollbackNothing},
		{"KeyOrderHeldWhileOthersFlow", testKeyOrder},
		{"RejectedParked", testRejected},
		{"NotBeforeScheduledOrParked", testRelayNotBefore},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			s := newSubject(t, time.Now)
			in, ok := s.Store.(outbox.Inspector)
			if !ok {
				t.Fatalf("%T does not implement outbox.Inspector", s.Store)
			}
			b := newBroker(t)
			g, err := idem.New(memory.New(), idem.Options{Scope: "consumer"})
			if err != nil {
				t.Fatal(err)
			}
			tc.fn(&relayEnv{env: env{t: t, s: s, in: in, ctx: ctx}, b: b, guard: g, runs: map[string]int{}})
		})
	}
}

type relayEnv struct {
	env
	b     Broker
	guard *idem.Guard

	mu        sync.Mutex
	received  []idem.Message // every delivery, in order
	runs      map[string]int // consumer handler runs per id
	processed []string       // ids in the order the handler ran
}

// relayOptions are quick ones for tests.
func relayOptions(o outbox.RelayOptions) outbox.RelayOptions {
	if o.PollInterval == 0 {
		o.PollInterval = 10 * time.Millisecond
	}
	if o.Lease == 0 {
		o.Lease = 2 * time.Second
	}
	if o.Backoff == nil {
		o.Backoff = func(int) time.Duration { return 50 * time.Millisecond }
	}
	return o
}

// run starts a relay and returns its stop (also registered as cleanup).
func (r *relayEnv) run(s outbox.Store, p outbox.Publisher, o outbox.RelayOptions) (stop func()) {
	r.t.Helper()
	rl, err := outbox.NewRelay(s, p, relayOptions(o))
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan error, 1)
	go func() { done <- rl.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				r.t.Errorf("Run: %v", err)
			}
		})
	}
	r.t.Cleanup(stop)
	return stop
}

// runWatchingParks starts a relay and returns the first EventParked it
// reports.
func (r *relayEnv) runWatchingParks() <-chan outbox.Event {
	parked := make(chan outbox.Event, 1)
	r.run(r.s.Store, r.b.Publisher, outbox.RelayOptions{Observer: outbox.ObserverFunc(func(_ context.Context, e outbox.Event) {
		if e.Kind == outbox.EventParked {
			select {
			case parked <- e:
			default:
			}
		}
	})})
	return parked
}

// consume receives until n distinct ids have been processed, running
// each delivery through the guard.
func (r *relayEnv) consume(n int) {
	r.t.Helper()
	for {
		r.mu.Lock()
		done, got := len(r.processed) >= n, len(r.processed)
		r.mu.Unlock()
		if done {
			return
		}
		m, err := r.b.Receive(r.ctx)
		if err != nil {
			r.t.Fatalf("receive (after %d of %d messages): %v", got, n, err)
		}
		r.mu.Lock()
		r.received = append(r.received, m)
		r.mu.Unlock()
		_, err = r.guard.Do(r.ctx, m, func(ctx context.Context) ([]byte, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.runs[m.ID]++
			r.processed = append(r.processed, m.ID)
			return nil, nil
		})
		if err != nil {
			r.t.Fatalf("consumer guard on %q: %v", m.ID, err)
		}
	}
}

// deliveries counts the deliveries of id.
func (r *relayEnv) deliveries(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.received {
		if m.ID == id {
			n++
		}
	}
	return n
}

func (r *relayEnv) checkOnce(ids ...string) {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if r.runs[id] != 1 {
			r.t.Errorf("the consumer's handler ran %d times for %s, want once", r.runs[id], id)
		}
	}
}

func (r *relayEnv) waitStats(what string, cond func(outbox.Stats) bool) outbox.Stats {
	r.t.Helper()
	for {
		st, err := r.in.Stats(r.ctx, time.Now())
		if err != nil {
			r.t.Fatal(err)
		}
		if cond(st) {
			return st
		}
		select {
		case <-r.ctx.Done():
			r.t.Fatalf("timed out waiting for %s (stats %+v)", what, st)
		case <-time.After(5 * time.Millisecond): // polling interval
		}
	}
}

func (r *relayEnv) msg(id, key string) outbox.Message {
	return outbox.Message{ID: id, Destination: r.b.Destination, OrderingKey: key, Payload: []byte(`{"id":"` + id + `"}`),
		Headers: map[string]string{"Content-Type": "application/json", "X-Test": id}}
}

func testStableIDs(r *relayEnv) {
	var msgs []outbox.Message
	for i := range 20 {
		key := []string{"", "A", "B"}[i%3]
		msgs = append(msgs, r.msg(fmt.Sprintf("stable-%02d", i), key))
	}
	r.enqueue(msgs...)
	r.run(r.s.Store, r.b.Publisher, outbox.RelayOptions{BatchSize: 7})
	r.consume(len(msgs))
	r.waitStats("every record marked", func(st outbox.Stats) bool { return st.Published == int64(len(msgs)) })
	byID := map[string]outbox.Message{}
	for _, m := range msgs {
		byID[m.ID] = m
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.received {
		want, ok := byID[m.ID]
		if !ok {
			r.t.Errorf("the consumer's key is %q, not a stable id the outbox holds", m.ID)
			continue
		}
		if !bytes.Equal(m.Payload, want.Payload) || m.Header("X-Test") != want.ID {
			r.t.Errorf("%s arrived as %q with X-Test %q", m.ID, m.Payload, m.Header("X-Test"))
		}
	}
	if len(r.processed) != len(msgs) {
		r.t.Errorf("processed %d, want %d", len(r.processed), len(msgs))
	}
}

// Crashing wraps a store whose relay dies at the first MarkPublished: that
// mark and every call after it fail, and its lease is never released.
type Crashing struct {
	outbox.Store
	dead    atomic.Bool
	crashed chan struct{}
	once    sync.Once
	// AtMark: the relay dies when it reaches MarkPublished (after the
	// broker confirmed). Otherwise it dies when Crash is called.
	AtMark bool
}

// NewCrashing wraps s.
func NewCrashing(s outbox.Store, atMark bool) *Crashing {
	return &Crashing{Store: s, crashed: make(chan struct{}), AtMark: atMark}
}

// Crash kills the relay's store from now on.
func (c *Crashing) Crash() { c.once.Do(func() { c.dead.Store(true); close(c.crashed) }) }

// Crashed is closed once the relay died.
func (c *Crashing) Crashed() <-chan struct{} { return c.crashed }

var errCrashed = errors.New("outboxtest: the relay's process died")

// Fetch implements outbox.Store.
func (c *Crashing) Fetch(ctx context.Context, req outbox.FetchRequest) ([]outbox.Record, error) {
	if c.dead.Load() {
		return nil, errCrashed
	}
	return c.Store.Fetch(ctx, req)
}

// MarkPublished implements outbox.Store.
func (c *Crashing) MarkPublished(ctx context.Context, seqs []int64, now time.Time) error {
	if c.AtMark {
		c.Crash()
	}
	if c.dead.Load() {
		return errCrashed
	}
	return c.Store.MarkPublished(ctx, seqs, now)
}

// MarkFailed implements outbox.Store.
func (c *Crashing) MarkFailed(ctx context.Context, fs []outbox.Failure) error {
	if c.dead.Load() {
		return errCrashed
	}
	return c.Store.MarkFailed(ctx, fs)
}

// Lease implements outbox.Store.
func (c *Crashing) Lease(ctx context.Context, req outbox.LeaseRequest) (outbox.Lease, error) {
	if c.dead.Load() {
		return outbox.Lease{}, errCrashed
	}
	return c.Store.Lease(ctx, req)
}

// ReleaseLease implements outbox.Store.
func (c *Crashing) ReleaseLease(ctx context.Context, req outbox.LeaseRequest) error {
	if c.dead.Load() {
		return errCrashed
	}
	return c.Store.ReleaseLease(ctx, req)
}

// Cleanup implements outbox.Store.
func (c *Crashing) Cleanup(ctx context.Context, req outbox.CleanupRequest) (int, error) {
	if c.dead.Load() {
		return 0, errCrashed
	}
	return c.Store.Cleanup(ctx, req)
}

func testKilledBeforeMark(r *relayEnv) {
	ids := []string{"charged-1", "charged-2", "charged-3"}
	for _, id := range ids {
		r.enqueue(r.msg(id, "order"))
	}
	c := NewCrashing(r.s.Store, true)
	stop := r.run(c, r.b.Publisher, outbox.RelayOptions{BatchSize: 1})
	<-c.Crashed() // charged-1 is at the broker, not marked
	stop()
	r.consume(1)
	if st := r.waitStats("stats", func(outbox.Stats) bool { return true }); st.Published != 0 {
		r.t.Fatalf("the dead relay marked %d records", st.Published)
	}
	// A new relay takes the lease once the dead one's ends, and publishes
	// charged-1 again: same id, same content.
	r.run(r.s.Store, r.b.Publisher, outbox.RelayOptions{})
	// The repeat of charged-1 goes out ahead of charged-2 in their key, so
	// it has arrived once the other two have.
	r.consume(len(ids))
	r.waitStats("every record marked", func(st outbox.Stats) bool { return st.Published == int64(len(ids)) })
	if n := r.deliveries("charged-1"); n < 1 || n > 2 || (!r.b.Dedups && n != 2) {
		r.t.Errorf("charged-1 delivered %d times, want twice (once when the broker drops the repeat)", n)
	}
	r.checkOnce(ids...)
}

func testLeaderKilled(r *relayEnv) {
	const lease = time.Second
	var (
		mu       sync.Mutex
		acquired = map[string]time.Time{}
	)
	obs := outbox.ObserverFunc(func(_ context.Context, e outbox.Event) {
		if e.Kind == outbox.EventLeaseAcquired {
			mu.Lock()
			acquired[e.Owner] = time.Now()
			mu.Unlock()
		}
	})
	leader := NewCrashing(r.s.Store, false)
	r.run(leader, r.b.Publisher, outbox.RelayOptions{Owner: "a", Lease: lease, Observer: obs})
	r.waitStats("a leads", func(st outbox.Stats) bool { return st.Lease.Owner == "a" })
	r.run(r.s.Store, r.b.Publisher, outbox.RelayOptions{Owner: "b", Lease: lease, Observer: obs})
	r.enqueue(r.msg("before", "k"))
	r.consume(1)
	leader.Crash()
	died := time.Now()
	r.enqueue(r.msg("after", "k"))
	r.consume(2)
	mu.Lock()
	took, ok := acquired["b"]
	mu.Unlock()
	if !ok {
		r.t.Fatal("b never acquired the lease")
	}
	if d := took.Sub(died); d > lease+lease/5+500*time.Millisecond {
		r.t.Errorf("b took over %v after a died, with a %v lease", d, lease)
	} else {
		r.t.Logf("b took over %v after a died (lease %v)", d, lease)
	}
	r.checkOnce("before", "after")
}

func testRollbackNothing(r *relayEnv) {
	r.run(r.s.Store, r.b.Publisher, outbox.RelayOptions{})
	boom := errors.New("the business transaction failed")
	err := r.s.InTx(r.ctx, func(ctx context.Context, enq Enqueue) error {
		if err := enq(ctx, r.msg("rolled-back-1", ""), r.msg("rolled-back-2", "k")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		r.t.Fatal(err)
	}
	r.enqueue(r.msg("committed", "k"))
	r.consume(1)
	r.waitStats("committed marked", func(st outbox.Stats) bool { return st.Published == 1 })
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Equal(r.processed, []string{"committed"}) {
		r.t.Fatalf("the consumer saw %v, want only the committed message", r.processed)
	}
	if st, _ := r.in.Stats(r.ctx, time.Now()); st.Pending != 0 || st.Published != 1 {
		r.t.Fatalf("stats %+v: the rolled back messages are in the outbox", st)
	}
}

// failing fails the first n publishes of one id, without sending them.
type failing struct {
	outbox.Publisher
	id     string
	n      atomic.Int32
	before func() // called at each failure
}

func (f *failing) Publish(ctx context.Context, recs []outbox.Record) []error {
	errs := make([]error, len(recs))
	var pass []outbox.Record
	var at []int
	for i, r := range recs {
		if r.ID == f.id && f.n.Add(-1) >= 0 {
			if f.before != nil {
				f.before()
			}
			errs[i] = errors.New("outboxtest: broker unavailable")
			continue
		}
		pass = append(pass, r)
		at = append(at, i)
	}
	if len(pass) > 0 {
		for j, err := range f.Publisher.Publish(ctx, pass) {
			errs[at[j]] = err
		}
	}
	return errs
}

func testKeyOrder(r *relayEnv) {
	var msgs []outbox.Message
	for i := range 5 {
		msgs = append(msgs, r.msg(fmt.Sprintf("A%d", i), "A"), r.msg(fmt.Sprintf("B%d", i), "B"), r.msg(fmt.Sprintf("U%d", i), ""))
	}
	r.enqueue(msgs...)
	// A0 fails three times, backing off 50 ms each: A1..A4 wait behind it,
	// B and the unordered messages go out meanwhile.
	f := &failing{Publisher: r.b.Publisher, id: "A0"}
	f.n.Store(3)
	r.run(r.s.Store, f, outbox.RelayOptions{})
	r.consume(len(msgs))
	r.mu.Lock()
	defer r.mu.Unlock()
	var a, b []string
	for _, id := range r.processed {
		switch id[0] {
		case 'A':
			a = append(a, id)
		case 'B':
			b = append(b, id)
		}
	}
	if !slices.Equal(a, []string{"A0", "A1", "A2", "A3", "A4"}) || !slices.Equal(b, []string{"B0", "B1", "B2", "B3", "B4"}) {
		r.t.Fatalf("per-key order: A %v, B %v", a, b)
	}
	if slices.Index(r.processed, "B4") > slices.Index(r.processed, "A0") || slices.Index(r.processed, "U4") > slices.Index(r.processed, "A0") {
		r.t.Fatalf("B and the unordered messages waited for A0: %v", r.processed)
	}
}

func testRejected(r *relayEnv) {
	if r.b.Rejected == nil {
		r.t.Skip("the broker harness has no message its broker refuses")
	}
	bad := *r.b.Rejected
	bad.OrderingKey = "A"
	r.enqueue(bad, r.msg("A-after", "A"), r.msg("B-1", "B"))
	parked := r.runWatchingParks()
	r.consume(1)
	select {
	case e := <-parked:
		if e.Kind != outbox.EventParked || e.Record.ID != bad.ID || e.Err == nil {
			r.t.Errorf("parked %+v (%v)", e.Record, e.Err)
		}
	case <-r.ctx.Done():
		r.t.Fatal("the rejected message was not parked")
	}
	st := r.waitStats("B-1 marked", func(st outbox.Stats) bool { return st.Published == 1 })
	if st.Parked != 1 || st.Pending != 1 {
		r.t.Fatalf("stats %+v, want the rejected message parked and A-after held behind it", st)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Equal(r.processed, []string{"B-1"}) {
		r.t.Fatalf("the consumer saw %v, want B-1 only", r.processed)
	}
}

// testRelayNotBefore: a message with NotBefore is delivered from that time on
// by a broker that schedules, while the later messages of its key go out
// at once (the relay's order is the publishing order; delivery is the
// broker's); a publisher that cannot schedule refuses it, and the relay
// parks it, holding back its key, never delivering it early.
func testRelayNotBefore(r *relayEnv) {
	at := time.Now().Add(time.Second)
	later := r.msg("later", "S")
	later.NotBefore = at
	r.enqueue(later, r.msg("S-after", "S"), r.msg("free", ""))
	parked := r.runWatchingParks()
	if r.b.Schedules {
		r.consume(3)
		if now := time.Now(); now.Before(at) {
			r.t.Fatalf("the scheduled message was delivered at %v, before its NotBefore %v", now, at)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.processed[2] != "later" {
			r.t.Fatalf("the consumer saw %v, want the scheduled message last", r.processed)
		}
		return
	}
	r.consume(1)
	select {
	case e := <-parked:
		if e.Record.ID != "later" || e.Err == nil || !strings.Contains(e.Err.Error(), "cannot schedule") {
			r.t.Errorf("parked %+v (%v), want the scheduled message, its error saying the broker cannot schedule", e.Record, e.Err)
		}
	case <-r.ctx.Done():
		r.t.Fatal("the scheduled message was not parked")
	}
	st := r.waitStats("free marked", func(st outbox.Stats) bool { return st.Published == 1 })
	if st.Parked != 1 || st.Pending != 1 {
		r.t.Fatalf("stats %+v, want the scheduled message parked and S-after held behind it", st)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Equal(r.processed, []string{"free"}) {
		r.t.Fatalf("the consumer saw %v, want free only", r.processed)
	}
}
