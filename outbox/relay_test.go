package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	outboxmemory "github.com/idemgo/idem/outbox/memory"
	"github.com/idemgo/idem/outbox/outboxtest"
	"github.com/idemgo/idem/store/memory"
)

// broker is an in-process broker: it keeps every confirmed publish, in
// order, and fails the records fail says to.
type broker struct {
	mu       sync.Mutex
	got      []outbox.Record
	fail     func(r outbox.Record) error
	inFlight atomic.Int32
	overlap  atomic.Bool // two calls ran at once
}

func (b *broker) Publish(ctx context.Context, recs []outbox.Record) []error {
	if b.inFlight.Add(1) > 1 {
		b.overlap.Store(true)
	}
	defer b.inFlight.Add(-1)
	errs := make([]error, len(recs))
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, r := range recs {
		if err := ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		if b.fail != nil {
			if errs[i] = b.fail(r); errs[i] != nil {
				continue
			}
		}
		b.got = append(b.got, r)
	}
	return errs
}

func (b *broker) setFail(f func(outbox.Record) error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fail = f
}

func (b *broker) ids() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, len(b.got))
	for i, r := range b.got {
		out[i] = r.ID
	}
	return out
}

func newStore(t *testing.T) *outboxmemory.Store {
	t.Helper()
	s, err := outboxmemory.New(outboxmemory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func enqueue(t *testing.T, s *outboxmemory.Store, msgs ...outbox.Message) {
	t.Helper()
	err := s.InTx(context.Background(), func(ctx context.Context, tx *outboxmemory.Tx) error {
		return s.Enqueue(ctx, tx, msgs...)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func fastOptions(o outbox.RelayOptions) outbox.RelayOptions {
	if o.PollInterval == 0 {
		o.PollInterval = 5 * time.Millisecond
	}
	if o.Lease == 0 {
		o.Lease = time.Second
	}
	if o.Backoff == nil {
		o.Backoff = func(int) time.Duration { return 20 * time.Millisecond }
	}
	return o
}

// start runs a relay until the test ends and returns its stop function.
func start(t *testing.T, s outbox.Store, p outbox.Publisher, o outbox.RelayOptions) (*outbox.Relay, func()) {
	t.Helper()
	r, err := outbox.NewRelay(s, p, fastOptions(o))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return r, stop
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // polling interval
	}
}

func stats(t *testing.T, s outbox.Inspector) outbox.Stats {
	t.Helper()
	st, err := s.Stats(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// orderOf returns, per ordering key, the ids in the order given.
func orderOf(recs []outbox.Message, ids []string) map[string][]string {
	key := map[string]string{}
	for _, m := range recs {
		key[m.ID] = m.OrderingKey
	}
	out := map[string][]string{}
	for _, id := range ids {
		if k := key[id]; k != "" {
			out[k] = append(out[k], id)
		}
	}
	return out
}

func messages(keys []string, perKey int) []outbox.Message {
	var out []outbox.Message
	for i := range perKey {
		for _, k := range keys {
			out = append(out, outbox.Message{ID: fmt.Sprintf("%s%d", k, i), Destination: "d", OrderingKey: k, Payload: []byte(k)})
		}
		out = append(out, outbox.Message{ID: fmt.Sprintf("u%d", i), Destination: "d"})
	}
	return out
}

func TestRelayPublishesOnceInKeyOrder(t *testing.T) {
	s := newStore(t)
	msgs := messages([]string{"A", "B", "C"}, 300)
	for i := 0; i < len(msgs); i += 100 {
		enqueue(t, s, msgs[i:min(i+100, len(msgs))]...)
	}
	b := &broker{}
	start(t, s, b, outbox.RelayOptions{BatchSize: 128})
	eventually(t, "every message published", func() bool { return stats(t, s).Published == int64(len(msgs)) })
	got := b.ids()
	if len(got) != len(msgs) {
		t.Fatalf("%d publishes for %d messages", len(got), len(msgs))
	}
	want := orderOf(msgs, idsOf(msgs))
	if g := orderOf(msgs, got); fmt.Sprint(g) != fmt.Sprint(want) {
		t.Fatalf("per-key order broken")
	}
}

func idsOf(msgs []outbox.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// A failing message holds back the later messages of its key and nothing
// else; once it goes out, its key follows in order.
func TestRelayFailureHoldsBackOnlyItsKey(t *testing.T) {
	s := newStore(t)
	msgs := messages([]string{"A", "B"}, 5)
	enqueue(t, s, msgs...)
	b := &broker{}
	var failures atomic.Int32
	b.setFail(func(r outbox.Record) error {
		if r.ID == "A1" && failures.Add(1) <= 3 {
			return errors.New("broker timeout")
		}
		return nil
	})
	var mu sync.Mutex
	var failed []outbox.Event
	start(t, s, b, outbox.RelayOptions{Observer: outbox.ObserverFunc(func(_ context.Context, e outbox.Event) {
		if e.Kind == outbox.EventFailed {
			mu.Lock()
			failed = append(failed, e)
			mu.Unlock()
		}
	})})
	eventually(t, "every message published", func() bool { return stats(t, s).Published == int64(len(msgs)) })
	got := b.ids()
	if len(got) != len(msgs) {
		t.Fatalf("publishes %v", got)
	}
	if o := orderOf(msgs, got); !slices.Equal(o["A"], []string{"A0", "A1", "A2", "A3", "A4"}) || !slices.Equal(o["B"], []string{"B0", "B1", "B2", "B3", "B4"}) {
		t.Fatalf("per-key order %v", o)
	}
	// B flowed while A1 backed off: B4 went out before A1.
	if slices.Index(got, "B4") > slices.Index(got, "A1") || slices.Index(got, "u4") > slices.Index(got, "A1") {
		t.Fatalf("B and unordered messages waited for A1: %v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failed) != 3 || failed[2].Record.ID != "A1" || failed[2].Record.Attempts != 3 || failed[2].Err.Error() != "broker timeout" {
		t.Fatalf("failure events %+v", failed)
	}
}

// A message the broker rejects is parked: it and its key wait for an
// operator; everything else flows. After a retry it goes out, in order.
func TestRelayParksRejectedMessages(t *testing.T) {
	s := newStore(t)
	msgs := messages([]string{"A", "B"}, 3)
	enqueue(t, s, msgs...)
	b := &broker{}
	var reject atomic.Bool
	reject.Store(true)
	b.setFail(func(r outbox.Record) error {
		if r.ID == "A1" && reject.Load() {
			return outbox.Reject(errors.New("message too large"))
		}
		return nil
	})
	parked := make(chan outbox.Event, 10)
	start(t, s, b, outbox.RelayOptions{Observer: outbox.ObserverFunc(func(_ context.Context, e outbox.Event) {
		if e.Kind == outbox.EventParked {
			parked <- e
		}
	})})
	e := <-parked
	if e.Record.ID != "A1" || e.Err == nil || e.Record.Attempts != 1 {
		t.Fatalf("parked event %+v", e)
	}
	eventually(t, "the others published", func() bool { return stats(t, s).Published == int64(len(msgs)-2) })
	if st := stats(t, s); st.Parked != 1 || st.Pending != 1 {
		t.Fatalf("stats %+v, want A1 parked and A2 held back", st)
	}
	if got := b.ids(); slices.Contains(got, "A2") || slices.Contains(got, "A1") {
		t.Fatalf("published %v: A1 or A2 went out", got)
	}
	reject.Store(false)
	if n, err := s.Retry(context.Background(), outbox.RetryRequest{Now: time.Now()}); err != nil || n != 1 {
		t.Fatalf("retry: %d, %v", n, err)
	}
	eventually(t, "A1 and A2 published", func() bool { return stats(t, s).Published == int64(len(msgs)) })
	if o := orderOf(msgs, b.ids()); !slices.Equal(o["A"], []string{"A0", "A1", "A2"}) {
		t.Fatalf("A's order %v", o["A"])
	}
}

func TestRelayMaxAttemptsParks(t *testing.T) {
	s := newStore(t)
	enqueue(t, s, outbox.Message{ID: "x", Destination: "d"})
	b := &broker{fail: func(outbox.Record) error { return errors.New("down") }}
	start(t, s, b, outbox.RelayOptions{MaxAttempts: 3})
	eventually(t, "x parked", func() bool { return stats(t, s).Parked == 1 })
	recs, err := s.List(context.Background(), outbox.ListFilter{})
	if err != nil || len(recs) != 1 || recs[0].Attempts != 3 || recs[0].LastError != "down" {
		t.Fatalf("record %+v, %v", recs, err)
	}
}

// Two relays on one outbox: one publishes at a time. When it dies without
// releasing its lease, the other takes over once the lease ends.
func TestRelayOneActiveAndTakeover(t *testing.T) {
	s := newStore(t)
	b := &broker{}
	const lease = 600 * time.Millisecond
	dying := outboxtest.NewCrashing(s, false)
	var acquired sync.Map
	obs := outbox.ObserverFunc(func(_ context.Context, e outbox.Event) {
		if e.Kind == outbox.EventLeaseAcquired {
			acquired.Store(e.Owner, time.Now())
		}
	})
	_, stopA := start(t, dying, b, outbox.RelayOptions{Owner: "a", Lease: lease, Observer: obs})
	eventually(t, "a leads", func() bool { _, ok := acquired.Load("a"); return ok })
	start(t, s, b, outbox.RelayOptions{Owner: "b", Lease: lease, Observer: obs})
	for i := range 20 {
		enqueue(t, s, outbox.Message{ID: fmt.Sprint("m", i), Destination: "d", OrderingKey: "k"})
	}
	eventually(t, "20 published", func() bool { return stats(t, s).Published == 20 })
	if _, ok := acquired.Load("b"); ok {
		t.Fatal("b acquired the lease while a held it")
	}
	dying.Crash()
	died := time.Now()
	stopA()
	enqueue(t, s, outbox.Message{ID: "after", Destination: "d", OrderingKey: "k"})
	eventually(t, "b publishes", func() bool { return stats(t, s).Published == 21 })
	v, _ := acquired.Load("b")
	took := v.(time.Time).Sub(died)
	if took > lease+lease/5+200*time.Millisecond {
		t.Fatalf("b took over %v after a died; the lease is %v", took, lease)
	}
	t.Logf("b took over %v after a died (lease %v)", took, lease)
	if b.overlap.Load() {
		t.Fatal("two relays published at once")
	}
	if got := b.ids(); len(got) != 21 || got[20] != "after" {
		t.Fatalf("publishes %v", got)
	}
}

// The relay dies between the broker's confirmation and the mark: the next
// relay publishes the message again with the same id, and the consumer's
// idem guard runs its handler once.
func TestRelayKilledBetweenPublishAndMark(t *testing.T) {
	s := newStore(t)
	enqueue(t, s, outbox.Message{ID: "order-1-charged", Destination: "d", Payload: []byte("42")})
	c := outboxtest.NewCrashing(s, true) // confirmed, then the process dies before the mark
	b := &broker{}
	_, stop := start(t, c, b, outbox.RelayOptions{Lease: 300 * time.Millisecond})
	<-c.Crashed()
	stop()
	start(t, s, b, outbox.RelayOptions{Lease: 300 * time.Millisecond})
	eventually(t, "published again", func() bool { return stats(t, s).Published == 1 })
	got := b.ids()
	if !slices.Equal(got, []string{"order-1-charged", "order-1-charged"}) {
		t.Fatalf("publishes %v, want the message twice", got)
	}
	g, err := idem.New(memory.New(), idem.Options{Scope: "shipping"})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	for _, r := range b.got {
		_, err := g.Do(context.Background(), idem.Message{ID: r.ID, Payload: r.Payload}, func(context.Context) ([]byte, error) {
			runs.Add(1)
			return nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("the consumer's handler ran %d times, want 1", runs.Load())
	}
}

// A relay stopped right after the broker confirmed still marks what it
// published.
func TestRelayMarksOnShutdown(t *testing.T) {
	s := newStore(t)
	enqueue(t, s, outbox.Message{ID: "x", Destination: "d"})
	b := &broker{}
	r, err := outbox.NewRelay(s, b, fastOptions(outbox.RelayOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.fail = func(outbox.Record) error { cancel(); return nil }
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, s); st.Published != 1 || st.Lease.Until.After(time.Now()) {
		t.Fatalf("after shutdown: %+v, want x published and the lease released", st)
	}
}

// A Notifier store wakes an idle relay: with an hour's poll interval the
// message still goes out at once.
func TestRelayWokenByNotifier(t *testing.T) {
	s := newStore(t)
	b := &broker{}
	f := &fetchCounter{Store: s}
	batches := make(chan outbox.Event, 10)
	start(t, f, b, outbox.RelayOptions{PollInterval: time.Hour, Lease: time.Hour, Observer: outbox.ObserverFunc(func(_ context.Context, e outbox.Event) {
		if e.Kind == outbox.EventBatch {
			batches <- e
		}
	})})
	eventually(t, "the first fetch", func() bool { return f.n.Load() > 0 }) // now idle for an hour
	enqueue(t, s, outbox.Message{ID: "x", Destination: "d"})
	select {
	case e := <-batches:
		if e.Published != 1 {
			t.Fatalf("batch %+v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the relay was not woken")
	}
}

// fetchCounter counts the fetches that returned.
type fetchCounter struct {
	*outboxmemory.Store
	n atomic.Int32
}

func (f *fetchCounter) Fetch(ctx context.Context, req outbox.FetchRequest) ([]outbox.Record, error) {
	defer f.n.Add(1)
	return f.Store.Fetch(ctx, req)
}

func TestRelayCleansUpAfterRetention(t *testing.T) {
	s := newStore(t)
	for i := range 25 {
		enqueue(t, s, outbox.Message{ID: fmt.Sprint(i), Destination: "d"})
	}
	b := &broker{}
	start(t, s, b, outbox.RelayOptions{Retention: 30 * time.Millisecond, CleanupInterval: 10 * time.Millisecond, CleanupBatch: 10})
	eventually(t, "published and cleaned up", func() bool {
		st := stats(t, s)
		return st.Pending == 0 && st.Published == 0 && len(b.ids()) == 25
	})
}

func TestNewRelayValidates(t *testing.T) {
	s := newStore(t)
	for _, o := range []outbox.RelayOptions{
		{BatchSize: -1}, {Lease: time.Millisecond}, {Lease: 3 * time.Second, PublishTimeout: 2 * time.Second}, {MaxAttempts: -1},
	} {
		if _, err := outbox.NewRelay(s, &broker{}, o); !errors.Is(err, outbox.ErrInvalidOptions) {
			t.Errorf("%+v: %v, want ErrInvalidOptions", o, err)
		}
	}
	if _, err := outbox.NewRelay(nil, &broker{}, outbox.RelayOptions{}); !errors.Is(err, outbox.ErrInvalidOptions) {
		t.Errorf("nil store: %v", err)
	}
}

// slowMarks delays the writing of outcomes, so the relay's next batch is
// fetched and published while they are in flight.
type slowMarks struct {
	*outboxmemory.Store
}

func (s slowMarks) MarkFailed(ctx context.Context, fs []outbox.Failure) error {
	time.Sleep(30 * time.Millisecond)
	return s.Store.MarkFailed(ctx, fs)
}

func (s slowMarks) MarkPublished(ctx context.Context, seqs []int64, now time.Time) error {
	time.Sleep(30 * time.Millisecond)
	return s.Store.MarkPublished(ctx, seqs, now)
}

// The next batch is published while the last one's outcomes are written:
// a failure not written yet still holds back its key, and no record goes
// out twice.
func TestRelayPipelinedMarksKeepKeyOrder(t *testing.T) {
	s := newStore(t)
	msgs := messages([]string{"A", "B"}, 4)
	enqueue(t, s, msgs...)
	b := &broker{}
	var failures atomic.Int32
	b.setFail(func(r outbox.Record) error {
		if (r.ID == "A0" || r.ID == "A2") && failures.Add(1) <= 4 {
			return errors.New("broker timeout")
		}
		return nil
	})
	start(t, slowMarks{s}, b, outbox.RelayOptions{BatchSize: 1})
	eventually(t, "every message published", func() bool { return stats(t, s).Published == int64(len(msgs)) })
	got := b.ids()
	if o := orderOf(msgs, got); !slices.Equal(o["A"], []string{"A0", "A1", "A2", "A3"}) || !slices.Equal(o["B"], []string{"B0", "B1", "B2", "B3"}) {
		t.Fatalf("per-key order %v (publishes %v)", o, got)
	}
	if len(got) != len(msgs) {
		t.Fatalf("publishes %v: some went out twice", got)
	}
}

// The relay reports to the guards' observer: its events to ObserveRelay,
// its store failures (a fetch) to ObserveError, through idem.Observers.
func TestRelayReportsToTheObserver(t *testing.T) {
	s := newStore(t)
	enqueue(t, s, outbox.Message{ID: "x", Destination: "d", OrderingKey: "k"})
	f := &failingFetch{Store: s}
	f.fails.Store(1)
	facts := &relayFacts{}
	start(t, f, &broker{}, outbox.RelayOptions{Owner: "r1",
		Observer: idem.Observers(idem.NewSlogObserver(slog.New(slog.DiscardHandler)), facts)})
	eventually(t, "x published and its batch observed", func() bool {
		facts.mu.Lock()
		defer facts.mu.Unlock()
		for _, e := range facts.events {
			if e.Kind == outbox.EventBatch && e.Published == 1 {
				return true
			}
		}
		return false
	})
	facts.mu.Lock()
	defer facts.mu.Unlock()
	if len(facts.events) == 0 || facts.events[0].Kind != outbox.EventLeaseAcquired || facts.events[0].Owner != "r1" || facts.events[0].Lease.Token == 0 {
		t.Errorf("first event %+v, want r1's lease acquired", facts.events)
	}
	if len(facts.errs) != 1 || facts.errs[0].Component != "outbox" || !errors.Is(facts.errs[0].Err, errFetch) {
		t.Errorf("errors observed %+v, want the failed fetch from the outbox", facts.errs)
	}
}

// relayFacts is an observer of the relay's events and errors.
type relayFacts struct {
	mu     sync.Mutex
	events []outbox.Event
	errs   []idem.HandledError
}

var (
	_ idem.RelayObserver = (*relayFacts)(nil)
	_ idem.ErrorObserver = (*relayFacts)(nil)
)

func (f *relayFacts) Observe(context.Context, idem.Event) {}

func (f *relayFacts) ObserveRelay(_ context.Context, e outbox.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, e)
}

func (f *relayFacts) ObserveError(_ context.Context, e idem.HandledError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, e)
}

var errFetch = errors.New("fetch refused")

// failingFetch fails its first fetches (fails of them).
type failingFetch struct {
	*outboxmemory.Store
	fails atomic.Int32
}

func (f *failingFetch) Fetch(ctx context.Context, req outbox.FetchRequest) ([]outbox.Record, error) {
	if f.fails.Add(-1) >= 0 {
		return nil, errFetch
	}
	return f.Store.Fetch(ctx, req)
}
